"""Publishing to topics: validation (declared topics, JSON only, capped size), the batched INSERT in one
transaction (the caller's own, or ours), and the Redis wake-up that lets the dispatcher hand new
messages to cluster groups now instead of at its next poll. The wake-up is a hint, never needed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DuecastError
from ..fanout.client import RedisClient, connect_redis
from ..fanout.keys import Keys
from ..queries.topics import render_topics
from ..settings import Settings, TopicsSettings, load_settings
from ..storage.db import Database
from ..storage.outbox import Outbox
from ..storage.topic_ids import topic_id
from ..storage.units import Connection, Cursor, translated

INSERT_CHUNK = 500  # rows per multi-row INSERT: 500 x 64 KiB stays under the default 64 MiB packet


class PublishError(DuecastError, ValueError):
    """A message that cannot be published; nothing was written."""


@dataclass(frozen=True)
class Publish:
    """One message to publish to `topic`. `key` (optional, 1-191 characters) is for finding it."""

    topic: str
    payload: Any = None
    key: str | None = None


def encode(message: Publish, topics: TopicsSettings) -> tuple[str, str | None, str]:
    """(topic, key, JSON text) of a valid message; raises PublishError naming what is wrong."""
    if message.topic not in topics.names:
        raise PublishError(
            f"unknown topic {message.topic!r}; topics.names is {', '.join(topics.names) or 'empty'}"
        )
    if message.key is not None and not (isinstance(message.key, str) and 1 <= len(message.key) <= 191):
        raise PublishError("a message key must be a string of 1-191 characters")
    try:
        # allow_nan=False: NaN/Infinity are not JSON. Never pickle: payloads are data, not code.
        text = json.dumps(message.payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise PublishError(f"payload for {message.topic!r} is not JSON-serialisable: {exc}") from exc
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise PublishError(f"payload for {message.topic!r} holds a lone surrogate (not utf8mb4)") from exc
    if size > topics.max_payload_bytes:
        raise PublishError(
            f"payload for {message.topic!r} is {size} bytes; the limit is {topics.max_payload_bytes}"
        )
    return message.topic, message.key, text


class Publisher(Outbox):
    """Appends messages to topics; each message gets the next id of its topic, in commit order."""

    def __init__(self, settings: Settings, client: RedisClient | None) -> None:
        self.topics = settings.topics
        self.db = Database(settings.mysql)
        self.retry_s = settings.mysql.writer_retry_s
        self.client = client
        self.keys = Keys(settings.redis.key_prefix)
        self.sql = render_topics(self.topics)
        self._ids: dict[str, int] = {}

    @classmethod
    def connect(cls, config: str | None = None) -> Publisher:
        """A Publisher from the environment / DUECAST_CONFIG (or the TOML file `config`)."""
        return cls.from_settings(load_settings(config))

    @classmethod
    def from_settings(cls, settings: Settings) -> Publisher:
        return cls(settings, connect_redis(settings.redis))

    def publish(
        self,
        topic: str,
        payload: Any = None,
        *,
        key: str | None = None,
        conn: Connection | None = None,
    ) -> int:
        """Publish one message; returns its id within the topic. With `conn`, joins that open
        transaction (see publish_many)."""
        return self.publish_many([Publish(topic, payload, key)], conn=conn)[0]

    def publish_many(
        self,
        messages: Iterable[Publish],
        *,
        conn: Connection | None = None,
    ) -> list[int]:
        """Publish all messages or none, in one transaction; returns their ids, in the order given.

        Every message is validated before anything is written. Without `conn`, duecast commits and
        wakes the dispatcher. With `conn` (the caller's open transaction) nothing is committed here:
        the messages exist only if the caller commits (`with publisher.transaction(conn): ...`).
        Publishers of one topic take turns from here to their commit: that keeps ids in commit order.
        """
        rows = [encode(m, self.topics) for m in messages]
        if not rows:
            return []
        self._resolve({topic for topic, _, _ in rows})
        if conn is not None:
            with conn.cursor() as cur:
                return self.write(cur, rows)
        ids = self.on_own_connection(lambda cur: self.write(cur, rows), "publish")
        self.wake()
        return ids

    def write(self, cur: Cursor, rows: Sequence[tuple[str, str | None, str]]) -> list[int]:
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
        rows: Sequence[tuple[str, str | None, str]],
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
