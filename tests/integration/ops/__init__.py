"""Integration tests (real MariaDB and Redis) of operations: commands, health, logs, metrics, deploy."""
