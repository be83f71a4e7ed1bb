"""What an operator watches on topics: per group backlog, lag, in flight, dead letters, consumption
timeouts and retention trouble; per topic published volume over time. Read-only, bounded reads of
shared.queries.topics.TopicSQL (moved here from shared/monitor/: only storage runs statements).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..queries.topics import DEAD, DISPATCHED, IDLE, RUNNING, TopicSQL, render_topics
from ..settings import GroupSettings, TopicsSettings
from .db import Database
from .source_store import STATUS_COUNT_CAP, _scalar, _us
from .topic_ids import all_ids, finished_through
from .units import Cursor

VOLUME_WINDOWS_S = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class MemberStatus:
    name: str
    position: int
    owner: str | None
    live: bool  # a process holds it and heartbeats; a clean stop hands it back: not live at once
    handled: int
    failed: int
    skipped: int
    holds: bool = False  # heartbeated within member_ttl_s: it holds retention, live or just stopped


@dataclass(frozen=True)
class GroupStatus:
    topic: str
    group: str
    mode: str
    last_id: int  # the topic's newest message
    position: int  # cluster: the newest message with a delivery; broadcast: the lowest live member's
    backlog: int  # messages not yet finished by the group (capped per state at STATUS_COUNT_CAP)
    lag_s: float | None  # how long ago its oldest unfinished message was published
    pending: int = 0  # cluster: waiting to run (retries, replays)
    in_flight: int = 0  # cluster: dispatched or running
    dead: int = 0  # cluster: dead letters kept
    timeouts: int = 0  # cluster: batches whose first message has run longer than the group's timeout_s
    oldest_running_s: float | None = None
    skipped: int = 0  # messages deleted before the group (or a member) could read them
    finished_through: int | None = None  # every id up to this is finished (None: holds nothing)
    behind_retention: bool = False  # unfinished messages older than retention_s, kept for it
    members: list[MemberStatus] = field(default_factory=list)


class TopicMonitor:
    def __init__(self, db: Database, topics: TopicsSettings) -> None:
        self.db = db
        self.topics = topics
        self.sql: TopicSQL = render_topics(topics)

    def groups(self) -> list[GroupStatus]:
        """Every declared group whose rows exist (a group is made at its first use)."""
        with self.db.transaction() as cur:
            return [s for g in self.topics.groups if (s := self.group(cur, g)) is not None]

    def group(self, cur: Cursor, group: GroupSettings) -> GroupStatus | None:
        ids = self.ids(cur)
        key = (group.topic, group.name)
        if key not in ids:
            return None
        tid, gid = ids[key]
        if group.mode == "broadcast":
            return self._broadcast(cur, group, tid, gid)
        return self._cluster(cur, group, tid, gid)

    def finished_through(self, cur: Cursor, group: GroupSettings, gid: int) -> int | None:
        return finished_through(cur, self.sql, self.topics, group, gid)

    def ids(self, cur: Cursor) -> dict[tuple[str, str], tuple[int, int]]:
        return all_ids(cur, self.sql)

    def _cluster(self, cur: Cursor, group: GroupSettings, tid: int, gid: int) -> GroupStatus:
        counts = {}
        for state in (IDLE, DISPATCHED, RUNNING, DEAD):
            cur.execute(self.sql.count_state, (state, gid, STATUS_COUNT_CAP))
            counts[state] = int(_scalar(cur) or 0)
        cur.execute(self.sql.group_head, (gid,))
        position, last, skipped = (int(v) for v in cur.fetchone() or (0, 0, 0))
        cur.execute(self.sql.oldest_unfinished, (gid,))
        oldest = _scalar(cur)
        first = int(oldest) if oldest is not None else position + 1
        cur.execute(self.sql.timeouts, (gid, _us(group.timeout_s)))
        timeouts, running_us = cur.fetchone() or (0, None)
        lag = self._age(cur, tid, first, last)
        return GroupStatus(
            topic=group.topic,
            group=group.name,
            mode="cluster",
            last_id=last,
            position=position,
            backlog=last - position + counts[IDLE] + counts[DISPATCHED] + counts[RUNNING],
            lag_s=lag,
            pending=counts[IDLE],
            in_flight=counts[DISPATCHED] + counts[RUNNING],
            dead=counts[DEAD],
            timeouts=int(timeouts or 0),
            oldest_running_s=None if running_us is None else float(running_us) / 1e6,
            skipped=skipped,
            finished_through=min(first - 1, position),
            behind_retention=lag is not None and lag > self.topics.retention_s > 0,
        )

    def _broadcast(self, cur: Cursor, group: GroupSettings, tid: int, gid: int) -> GroupStatus:
        cur.execute(self.sql.group_head, (gid,))
        _, last, _ = (int(v) for v in cur.fetchone() or (0, 0, 0))
        cur.execute(self.sql.members_of, (_us(self.topics.member_ttl_s), gid))
        members = [
            MemberStatus(
                str(n), int(p), o, bool(beats) and o is not None, int(h), int(f), int(s), bool(beats)
            )
            for n, p, o, beats, h, f, s in cur.fetchall()
        ]
        live = [m.position for m in members if m.holds]  # as retention counts them (topic_ids)
        position = min(live) if live else last
        lag = self._age(cur, tid, position + 1, last)
        return GroupStatus(
            topic=group.topic,
            group=group.name,
            mode="broadcast",
            last_id=last,
            position=position,
            backlog=last - position,
            lag_s=lag,
            skipped=sum(m.skipped for m in members),
            finished_through=min(live) if live else None,  # a member that is gone holds nothing
            behind_retention=lag is not None and lag > self.topics.retention_s > 0,
            members=members,
        )

    def _age(self, cur: Cursor, tid: int, first: int, last: int) -> float | None:
        """Seconds since message `first` (or the next one kept) was published; None if past the end."""
        if first > last:
            return None
        cur.execute(self.sql.message_age, (tid, first))
        value = _scalar(cur)
        return None if value is None else float(value) / 1e6

    def volumes(self) -> list[tuple[str, int, dict[str, int]]]:
        """(topic, newest id, messages published in the last minute / hour / day), busiest first."""
        out = []
        with self.db.transaction() as cur:
            cur.execute(self.sql.topics_all)
            for tid, name, last in cur.fetchall():
                counts = {w: self._since(cur, int(tid), int(last), s) for w, s in VOLUME_WINDOWS_S.items()}
                out.append((str(name), int(last), counts))
        return sorted(out, key=lambda t: (-t[2]["hour"], -t[2]["day"], t[0]))

    def series(self, topic_name: str, buckets: int, bucket_s: float) -> list[int]:
        """Messages published in each of the last `buckets` periods of `bucket_s`, oldest first."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.topics_all)
            found = [(int(t), int(last)) for t, n, last in cur.fetchall() if n == topic_name]
            if not found:
                return [0] * buckets
            tid, last = found[0]
            since = [self._since(cur, tid, last, k * bucket_s) for k in range(buckets + 1)]
        # since[k] counts the last k buckets; one bucket is the difference of two neighbours.
        return [since[k + 1] - since[k] for k in reversed(range(buckets))]

    def _since(self, cur: Cursor, tid: int, last: int, seconds: float) -> int:
        """Messages published in the last `seconds`: ids are gap-free, so newest id - first id + 1."""
        if seconds <= 0:
            return 0
        cur.execute(self.sql.first_since, (tid, _us(seconds)))
        first = _scalar(cur)
        return 0 if first is None else last - int(first) + 1
