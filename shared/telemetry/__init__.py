"""Telemetry every layer may feed: the Prometheus metric catalog and the counts that fill it.

No I/O and no settings: /metrics is served by shared.process.health."""
