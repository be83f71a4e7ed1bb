"""Integration tests (real MariaDB and Redis) of the duecast command line and its logs."""
