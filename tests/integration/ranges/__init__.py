"""Integration tests (real MariaDB and Redis) of range mode: spans, packed reads, freshness."""
