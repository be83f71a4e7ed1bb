"""Read-only views for operators: staleness and freshness of re-scans, per-source snapshots, topic groups.

Bounded reads through the storage layer; nothing here writes."""
