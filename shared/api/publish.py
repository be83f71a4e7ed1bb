"""Publishing to topics: validation (declared topics, JSON only, capped size), the batched INSERT in one
transaction, the caller's own or ours (shared.storage.message_writer), and the Redis wake-up that lets
the dispatcher hand new messages to cluster groups now instead of at its next poll (a hint, never needed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..errors import DuecastError
from ..fanout.client import connect_redis
from ..settings import Settings, TopicsSettings, load_settings
from ..storage.message_writer import MessageWriter
from .job_input import MAX_PAYLOAD_DEPTH, _depth_within  # enqueue's cap, the same for messages


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
    _check_key(message.key)
    if not _depth_within(message.payload, MAX_PAYLOAD_DEPTH):
        # A consumer decoding it would hit Python's recursion limit on every attempt until dead.
        raise PublishError(f"payload for {message.topic!r} is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
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


def _check_key(key: object) -> None:
    """msg_key: VARCHAR(191) utf8mb4."""
    if key is None:
        return
    if not (isinstance(key, str) and 1 <= len(key) <= 191):
        raise PublishError("a message key must be a string of 1-191 characters")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        shown = ascii(key)[:60]  # a hostile key may be long: enough to find it
        raise PublishError(f"message key {shown} holds a lone surrogate, which utf8mb4 cannot store") from exc


class Publisher(MessageWriter):
    """Checks messages, appends them to topics and wakes the dispatcher after they commit; each
    message gets the next id of its topic, in commit order."""

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
        conn: object | None = None,
    ) -> int:
        """Publish one message; returns its id within the topic. With `conn`, joins that open
        transaction (see publish_many)."""
        return self.publish_many([Publish(topic, payload, key)], conn=conn)[0]

    def publish_many(
        self,
        messages: Iterable[Publish],
        *,
        conn: object | None = None,
    ) -> list[int]:
        """Publish all messages or none, in one transaction; returns their ids, in the order given.

        Every message is validated before anything is written. Without `conn`, duecast commits and
        wakes the dispatcher. With `conn` (the caller's open transaction, as Enqueuer.enqueue_many
        takes it) nothing is committed or rolled back here: the messages exist only if it commits.
        Publishers of one topic take turns from here to their commit: that keeps ids in commit order.
        """
        rows = [encode(m, self.topics) for m in messages]
        if not rows:
            return []
        ids = self.insert_messages(rows, conn)
        if conn is None:
            self.wake()
        return ids

    async def apublish(self, topic: str, payload: Any = None, *, key: str | None = None) -> int:
        """`publish` for asyncio code: the write runs on one of the Publisher's threads, so the event
        loop never waits for MySQL, and any number of tasks may await at once."""
        return (await self.apublish_many([Publish(topic, payload, key)]))[0]

    async def apublish_many(self, messages: Iterable[Publish]) -> list[int]:
        """`publish_many` for asyncio code (see apublish)."""
        return await self.off_loop(partial(self.publish_many, list(messages)))
