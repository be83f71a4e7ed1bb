"""Topics and their consumer groups (cluster or broadcast), with the retry steps of cluster groups."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from ..identifiers import check_identifier
from .base import Identifier, _Section
from .limits import Limits
from .sources import (
    SourceSettings,
)

TOPICS_SOURCE = "topics"
TopicName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_]{0,31}$")]
# RocketMQ's consumer retry levels: 10 s, 30 s, 1-10 min, 20 min, 30 min, 1 h, 2 h.
RETRY_STEPS_S = [10.0, 30.0, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]


def _check_start(text: str) -> str:
    """A start position: "earliest", "latest", a message id, or an ISO time with its zone."""
    if text in ("earliest", "latest") or (text.isascii() and text.isdigit() and len(text) <= 19):
        return text
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ValueError('start must be "earliest", "latest", a message id, or an ISO time with a zone')
    return text


StartAt = Annotated[str, AfterValidator(_check_start)]


def topic_source(topic: str, group: str) -> str:
    """A cluster group's source and ready list: `topics.<topic>-<group>` (names have no "-")."""
    return f"{TOPICS_SOURCE}.{topic}-{group}"


class GroupSettings(Limits):
    """A consumer group of a topic: "cluster" (each message handled once by any one of its workers,
    acked, retried, dead-lettered) or "broadcast" (each live member reads every message, no acks).
    A cluster group may set fleet-wide limits (settings/limits.py); they count its messages."""

    topic: TopicName
    name: TopicName
    mode: Literal["cluster", "broadcast"] = "cluster"
    start: StartAt = "latest"  # where a new group (or a new broadcast member) begins
    max_retries: int = Field(16, ge=0, le=1000)  # cluster: failed runs retried before dead
    # A cluster consumer's call taking longer is a failure (async: cancelled; plain: given up), and a
    # message in flight longer is alerted on.
    timeout_s: float = Field(300.0, gt=0, le=7 * 86400)

    @model_validator(mode="after")
    def _limits_need_cluster(self) -> Self:
        # A broadcast member reads messages itself: no dispatcher claims them, so nothing could hold it.
        if self.mode == "broadcast" and self.limited:
            raise ValueError(
                f"group {self.name}: rate_limit_per_s and max_running are for cluster groups (the "
                "dispatcher claims their messages); a broadcast group's members read on their own"
            )
        return self

    @property
    def source(self) -> str:
        return topic_source(self.topic, self.name)


class TopicsSettings(_Section):
    """Topics and their consumer groups (docs/topics.md); nothing is created until a topic is named."""

    names: list[TopicName] = []
    groups: list[GroupSettings] = []
    table_prefix: Identifier = "duecast_"  # tables <prefix>topics, messages, groups, deliveries...
    max_payload_bytes: int = Field(65_536, ge=16, le=16 * 1024 * 1024)
    retry_delays_s: list[float] = Field(default_factory=lambda: list(RETRY_STEPS_S), min_length=1)
    lease_s: float = Field(15.0, ge=2, le=86400)  # as jobs.lease_s, for a started message
    max_interruptions: int = Field(3, ge=1, le=1000)
    claim_batch: int = Field(2000, ge=1, le=10_000)
    high_water: int = Field(40_000, ge=1, le=10_000_000)
    visibility_timeout_s: float = Field(60.0, ge=1, le=86400)
    # Messages every group has finished are deleted this long after they were published.
    retention_s: float = Field(7 * 86400.0, ge=0, le=10 * 366 * 86400)
    maintain_interval_s: float = Field(5.0, gt=0, le=3600)  # pruning, alerts, metrics
    prune_batch: int = Field(5000, ge=1, le=100_000)
    member: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")  # default: host name
    member_ttl_s: float = Field(60.0, ge=3, le=86400)  # a broadcast member silent this long is gone
    poll_interval_s: float = Field(0.2, gt=0, le=60)  # a broadcast member's idle wait
    read_batch: int = Field(1000, ge=1, le=10_000)  # messages a broadcast member reads at once

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        for label, names in (("topics.names", self.names), ("groups", [g.source for g in self.groups])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{label} repeats {', '.join(dupes)}")
        for g in self.groups:
            if g.topic not in self.names:
                raise ValueError(f"group {g.name}: topic {g.topic!r} is not in topics.names")
            if len(g.topic) + len(g.name) > 47:
                raise ValueError(f"group {g.name}: topic and group names together exceed 47 characters")
        check_identifier(self.table("deliveries"))
        if self.claim_batch > self.high_water:
            raise ValueError("topics.claim_batch must be <= topics.high_water")
        return self

    def table(self, kind: str) -> str:
        """<prefix><kind>: topics, messages, groups, deliveries, attempts, members."""
        return self.table_prefix + kind

    def group(self, topic: str, name: str) -> GroupSettings:
        for g in self.groups:
            if (g.topic, g.name) == (topic, name):
                return g
        raise KeyError(f"no group {name!r} on topic {topic!r} in topics.groups")

    def group_sources(self) -> list[SourceSettings]:
        """One dispatchable source per cluster group: its deliveries, keyed by message id."""
        return [
            SourceSettings(
                name=g.source,
                table=self.table("deliveries"),
                id_column="seq",
                due_column="run_at",
                period_s=0,
                on_success="delete",
                claim_batch=self.claim_batch,
                high_water=self.high_water,
                visibility_timeout_s=self.visibility_timeout_s,
                lease_s=self.lease_s,  # its store's lease keeper (shared/storage/leased) runs on it
                timeout_s=g.timeout_s,  # a consumer call's time limit
                # Its fleet-wide limits: its bucket is group:<topic>/<group> (shared/storage/limits.py).
                rate_limit_per_s=g.rate_limit_per_s,
                rate_burst=g.rate_burst,
                max_running=g.max_running,
            )
            for g in self.groups
            if g.mode == "cluster"
        ]
