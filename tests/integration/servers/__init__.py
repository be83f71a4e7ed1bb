"""Integration tests (real MariaDB and Redis) of server set-ups: TLS, grants, secrets, Redis topologies."""
