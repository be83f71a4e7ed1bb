"""What a topic consumer receives: one Message, built from the row a worker or broadcast member read.

Data only: no connection, no settings. Registry.consumer (shared.api.handlers) wraps the user's function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Message:
    topic: str
    group: str
    id: int  # its id within the topic: 1, 2, 3... in publishing (commit) order
    key: str | None
    payload: Any  # the published JSON, decoded
    published_at: datetime  # the database's NOW(6) when it was published (its time zone)
    attempt: int = 0  # cluster groups: this delivery's attempt (1 = first); broadcast: 0
    retries: int = 0  # cluster groups: failed runs of this message in this group before this one

    @classmethod
    def from_row(cls, topic: str, group: str, row: dict[str, Any]) -> Message:
        return cls(
            topic=topic,
            group=group,
            id=int(row["seq"]),
            key=row["msg_key"],
            payload=json.loads(row["payload"]),
            published_at=row["created_at"],
            attempt=int(row.get("dc_attempt", 0)),
            retries=int(row.get("errors", 0)),
        )
