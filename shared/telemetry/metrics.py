"""Every Prometheus metric duecast exports: stable names, labels, units and help text in one place.

Roles only increment or set these; nothing here does I/O or reads settings. /metrics
(shared/process/health.py)
serves them from prometheus-client's process-wide registry, with the process and GC collectors.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

# Metrics are module objects, not built in main(): prometheus-client keeps one registry per
# process, and a counter is a fact about the process whichever object does the counting. They hold
# no connection and no setting, so this is not the import-time wiring the house style warns about.
NAMESPACE = "duecast"

# No `*_created` series beside each counter and histogram: a creation timestamp per label set
# doubles what is scraped, and Prometheus's rate() and increase() already handle restarts.
# The switch is process-wide and read when /metrics renders (prometheus-client >= 0.16).
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus-client

# Batch durations run from a 1-row ack (ms) to a 2,000-row batch of slow handlers (minutes).
_BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_HANDLER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def _counter(name: str, help_: str) -> Counter:
    return Counter(name, help_, ["source"], namespace=NAMESPACE)


# Counters per source, exported as duecast_<name>_total{source="..."}. Summing them over every
# process gives the system's totals (each process counts only what it did itself).
COUNTERS: dict[str, Counter] = {
    "claimed": _counter("claimed", "Rows claimed by a dispatcher (IDLE -> DISPATCHED)."),
    "pushed": _counter("pushed", "Entries pushed to a ready list after the claim committed."),
    "popped": _counter("popped", "Items a worker popped from a ready list (entries, bad items, duplicates)."),
    "started": _counter("started", "Rows a worker locked and handed to a handler."),
    "acked": _counter("acked", "Rows acked (touched or deleted) by a fenced compare-and-set."),
    "failed": _counter("failed", "Rows whose handler raised or returned an invalid ack (not acked)."),
    "retried": _counter("retried", "Jobs scheduled to run again after a failure."),
    "dead": _counter("dead", "Jobs that ran out of attempts and were dead-lettered."),
    "stale_acks": _counter("stale_acks", "Acks that matched no row: the attempt had been taken back."),
    "stale_entries": _counter("stale_entries", "Popped entries whose row no longer matched the fence."),
    "bad_entries": _counter("bad_entries", "Ready-list items that were not valid entries (quarantined)."),
    "redeliveries": _counter("redeliveries", "Rows requeued (not acked in time, entry lost, worker died)."),
    "wrong_type_keys": _counter(
        "wrong_type_keys", "duecast's Redis keys found holding the wrong type and moved aside."
    ),
    "locked_skipped": _counter(
        "locked_skipped",
        "Due rows (ranges in range mode) a claim passed over: another session held their lock.",
    ),
    "bad_holds": _counter("bad_holds", "Dead workers' hold records that did not parse (quarantined)."),
}

BATCH_SECONDS = Histogram(
    "batch_duration_seconds",
    "One unit of work of a role: a dispatcher's claim and push, a worker's lock, handle and ack.",
    ["role", "source"],
    namespace=NAMESPACE,
    buckets=_BATCH_BUCKETS,
)
HANDLER_SECONDS = Histogram(
    "handler_duration_seconds",
    "One handler call (a row, a job, or a slice of rows for a batch handler).",
    ["source"],
    namespace=NAMESPACE,
    buckets=_HANDLER_BUCKETS,
)

# Gauges that describe the whole system are set by the dispatcher only, so a sum or an average over
# processes never counts them twice. Workers leave them unset (no sample is exported).
DUE_BACKLOG = Gauge("due_backlog", "Rows due and not yet claimed.", ["source"], namespace=NAMESPACE)
READY_LENGTH = Gauge(
    "ready_list_length", "Entries in the source's Redis ready list.", ["source"], namespace=NAMESPACE
)
IN_FLIGHT = Gauge("in_flight", "Rows dispatched and not yet acked.", ["source"], namespace=NAMESPACE)
OLDEST_DUE_AGE = Gauge(
    "oldest_due_age_seconds",
    "How long the oldest unclaimed due row has been due.",
    ["source"],
    namespace=NAMESPACE,
)
WORST_STALENESS = Gauge(
    "worst_staleness_seconds",
    "Re-scan sources: NOW() minus the oldest last check of any row.",
    ["source"],
    namespace=NAMESPACE,
)
CHECKED_IN_PERIOD = Gauge(
    "checked_within_period_ratio",
    "Re-scan sources: share of rows checked within their period (0..1).",
    ["source"],
    namespace=NAMESPACE,
)

LIVE_WORKERS = Gauge(
    "live_workers",
    "Live worker processes (heartbeat within worker.dead_after_s) serving the source; 0: its work waits.",
    ["source"],
    namespace=NAMESPACE,
)

# Per process, set by shared/process/health.py.
LOOP_TURN_AGE = Gauge(
    "loop_turn_age_seconds",
    "Seconds since this process's main loop last turned (/healthz).",
    namespace=NAMESPACE,
)
DEPENDENCY_UP = Gauge(
    "dependency_up",
    "1 when this process's last round trip to the dependency succeeded (/readyz), else 0.",
    ["dependency"],
    namespace=NAMESPACE,
)


def add(source: str, counts: Mapping[str, int]) -> None:
    """Add a unit of work's counts to the counters of `source`; an unknown name is a KeyError."""
    for name, n in counts.items():
        if n:
            COUNTERS[name].labels(source=source).inc(n)


# Set by the dispatcher when a re-scan source's rows / period exceed its rate_limit_per_s: the
# period the limit allows (rows / rate); 0 while the limit does not bind.
LIMIT_PERIOD = Gauge(
    "limit_allowed_period_seconds",
    "Re-scan sources over their rate_limit_per_s: the period the limit allows (rows / rate).",
    ["source"],
    namespace=NAMESPACE,
)
