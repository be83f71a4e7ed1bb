"""Integration tests (real MariaDB and Redis) of one-off jobs."""
