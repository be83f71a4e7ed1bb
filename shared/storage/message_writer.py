"""Writing messages to topics: each topic's next ids reserved under its row lock (so ids commit in
order) and the batched INSERT, in the writer's own transaction or the caller's. Runs
shared.queries.topics.TopicSQL; what a valid message is, is shared/api/publish.py's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..fanout.client import RedisClient
from ..queries.topics import render_topics
from ..settings import Settings
from .outbox import Outbox
from .topic_ids import topic_id
from .units import Cursor, translated

INSERT_CHUNK = 500  # rows per multi-row INSERT: 500 x 64 KiB stays under the default 64 MiB packet
Message = tuple[str, str | None, str]  # (topic, key, JSON text), checked


class MessageWriter(Outbox):
    """Appends messages to topics; each message gets the next id of its topic, in commit order."""

    def __init__(self, settings: Settings, client: RedisClient | None) -> None:
        super().__init__(settings, client)
        self.topics = settings.topics
        self.sql = render_topics(self.topics)
        self._ids: dict[str, int] = {}

    def insert_messages(self, rows: Sequence[Message], conn: object | None) -> list[int]:
        """The rows' ids, written in the caller's open transaction `conn` (nothing committed here), or
        without it in a transaction of our own, committed. A topic's row is made at its first use."""
        self._resolve({topic for topic, _, _ in rows})
        if conn is not None:
            with self.joined(conn) as cur:
                return self.write(cur, rows)
        return self.on_own_connection(lambda cur: self.write(cur, rows), "publish")

    def write(self, cur: Cursor, rows: Sequence[Message]) -> list[int]:
        """Reserve each topic's next ids and INSERT the messages on `cur` (no commit). Topics are
        taken in name order, so two publishers of the same topics never deadlock."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i, (topic, _, _) in enumerate(rows):
            by_topic[topic].append(i)
        ids = [0] * len(rows)
        with translated():  # the caller's cursor too: duecast's errors, never the driver's
            self._insert(cur, rows, by_topic, ids)
        return ids

    def _insert(
        self,
        cur: Cursor,
        rows: Sequence[Message],
        by_topic: dict[str, list[int]],
        ids: list[int],
    ) -> None:
        for topic in sorted(by_topic):
            tid, members = self._ids[topic], by_topic[topic]
            cur.execute(self.sql.reserve, (len(members), tid))
            cur.execute(self.sql.reserved, (tid,))
            row = cur.fetchone()
            assert row is not None
            first = int(row[0]) - len(members) + 1
            for n, i in enumerate(members):
                ids[i] = first + n
            for lo in range(0, len(members), INSERT_CHUNK):
                chunk = members[lo : lo + INSERT_CHUNK]
                params = [p for i in chunk for p in (tid, ids[i], rows[i][1], rows[i][2])]
                cur.execute(self.sql.insert_message + ",".join([self.sql.insert_values] * len(chunk)), params)

    def _resolve(self, names: set[str]) -> None:
        """Topic ids, cached; a topic's row is made (on our own connection) at its first use."""
        missing = sorted(names - set(self._ids))
        if missing:

            def resolve(cur: Cursor) -> None:
                for name in missing:
                    self._ids[name] = topic_id(cur, self.sql, name)

            self.on_own_connection(resolve, "publish")
