"""The soak's cluster group beside the jobs: a topic and one cluster group with the jobs' leases, its
messages (numbered on their own for the checker), and the record of every message acked, written by
the consumer (tests/chaos/app.py) in the transaction that marks it done. This module owns their
settings and tables and reads only; the jobs' checker (checker.py) judges the messages too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.settings import GroupSettings, Settings, TopicsSettings
from tests.chaos.app import GROUP, TOPIC

Query = Callable[..., list[tuple[Any, ...]]]
TOPIC_TABLES = ("topics", "messages", "groups", "deliveries", "attempts", "members")


def acks_table(query: Query, name: str) -> None:
    """The record of acks a handler wrote in its finishing transaction (app.record_ack): n is the job's
    or message's number, unit its id (job id, or message id in the topic), at the database's time."""
    query(
        f"CREATE TABLE `{name}` (id BIGINT AUTO_INCREMENT PRIMARY KEY, n BIGINT NOT NULL, "
        "unit BIGINT NOT NULL, pid INT NOT NULL, at DECIMAL(17, 6) NOT NULL, KEY (n))"
    )


@dataclass
class ClusterGroup:
    query: Query  # the harness' autocommit session
    suffix: str
    jobs: dict[str, Any]  # the jobs' settings: the group takes their lease and interruptions
    expected: set[int] = field(default_factory=set)
    _next: int = 0

    def __post_init__(self) -> None:
        self.acks = f"chaos_msg_acks_{self.suffix}"
        self.topics = TopicsSettings(
            names=[TOPIC],
            groups=[GroupSettings(topic=TOPIC, name=GROUP, start="earliest")],
            table_prefix=f"chaos_{self.suffix}_",
            lease_s=self.jobs["lease_s"],
            max_interruptions=self.jobs["max_interruptions"],
            visibility_timeout_s=self.jobs["visibility_timeout_s"],
        )
        self.source = self.topics.groups[0].source

    def create_tables(self) -> None:
        """The acks record; the topic's own tables come from `duecast migrate` with `topics`."""
        acks_table(self.query, self.acks)

    def publish(self, settings: Settings, n: int) -> None:
        """n messages, each carrying its number for the checker."""
        numbers = range(self._next, self._next + n)
        self._next += n
        publisher = Publisher(settings, None)
        publisher.publish_many(Publish(TOPIC, {"n": k}) for k in numbers)
        publisher.db.close()
        self.expected.update(numbers)

    def acked(self) -> int:
        return int(self.query(f"SELECT COUNT(DISTINCT n) FROM `{self.acks}`")[0][0])

    def acks_by_number(self) -> dict[int, int]:
        return {int(n): int(c) for n, c in self.query(f"SELECT n, COUNT(*) FROM `{self.acks}` GROUP BY n")}

    def drop(self) -> None:
        tables = [self.acks, *(self.topics.table(name) for name in TOPIC_TABLES)]
        self.query("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in tables))
