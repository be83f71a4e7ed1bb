"""Integration tests (real MariaDB and Redis) of the data path: claim, start, ack, requeue."""
