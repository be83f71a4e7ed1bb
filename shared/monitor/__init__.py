"""Read-only views for operators: staleness and freshness of re-scans, per-source snapshots.

Bounded reads through the storage layer (topic groups' status is read there: shared.storage.topic_status);
nothing here writes or runs a statement."""
