"""Prometheus gauges for topics, set by the dispatcher's topics duty only (so a sum over processes never
counts them twice), and served by /metrics from prometheus-client's process-wide registry.

Kept apart from shared/telemetry/metrics.py so topics add metrics without touching the per-source ones.
"""

from __future__ import annotations

from prometheus_client import Gauge

from ..shared.storage.topic_status import GroupStatus

NAMESPACE = "duecast"
_GROUP = ["topic", "group"]

PUBLISHED = Gauge(
    "topic_last_id", "The newest message id of a topic (ids are gap-free).", ["topic"], namespace=NAMESPACE
)
BACKLOG = Gauge(
    "group_backlog", "Messages a consumer group has not finished yet.", _GROUP, namespace=NAMESPACE
)
LAG = Gauge(
    "group_lag_seconds",
    "How long ago the oldest message a consumer group has not finished was published (0: none).",
    _GROUP,
    namespace=NAMESPACE,
)
IN_FLIGHT = Gauge(
    "group_in_flight", "Cluster group: messages dispatched or running.", _GROUP, namespace=NAMESPACE
)
DEAD = Gauge("group_dead", "Cluster group: dead letters kept.", _GROUP, namespace=NAMESPACE)
TIMEOUTS = Gauge(
    "group_consumption_timeouts",
    "Cluster group: messages running longer than the group's timeout_s, one per batch (alert when > 0).",
    _GROUP,
    namespace=NAMESPACE,
)
BEHIND_RETENTION = Gauge(
    "group_behind_retention",
    "1 when the group holds messages older than topics.retention_s (they are kept for it).",
    _GROUP,
    namespace=NAMESPACE,
)
LIVE_MEMBERS = Gauge(
    "group_live_members", "Broadcast group: members heartbeating.", _GROUP, namespace=NAMESPACE
)


def publish(statuses: list[GroupStatus]) -> None:
    """Set every gauge from one round of group statuses."""
    for s in statuses:
        labels = {"topic": s.topic, "group": s.group}
        PUBLISHED.labels(topic=s.topic).set(s.last_id)
        BACKLOG.labels(**labels).set(s.backlog)
        LAG.labels(**labels).set(s.lag_s or 0.0)
        IN_FLIGHT.labels(**labels).set(s.in_flight)
        DEAD.labels(**labels).set(s.dead)
        TIMEOUTS.labels(**labels).set(s.timeouts)
        BEHIND_RETENTION.labels(**labels).set(1 if s.behind_retention else 0)
        if s.mode == "broadcast":
            LIVE_MEMBERS.labels(**labels).set(sum(1 for m in s.members if m.live))
