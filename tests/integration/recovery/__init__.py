"""Integration tests (real MariaDB and Redis) of recovery on the data path: deadlocks, lost
sessions, holds, rows locked elsewhere, keys of the wrong type, skewed clocks."""
