"""Integration tests (real MariaDB and Redis) of topics and consumer groups."""
