"""The Scope of a leased store: which catalog its statements come from, which rows they touch, and
how its log lines name them. Data only; the store in store.py runs the statements."""

from __future__ import annotations

from dataclasses import dataclass
from logging import Logger
from typing import Any

from ...queries.topics import TopicSQL


@dataclass(frozen=True)
class Scope:
    """What a leased store's statements touch, and how its log lines name it. Every statement
    takes its SET values first, then the scope's `where` arguments, then its own."""

    sql: TopicSQL  # the kind's catalog (job queues are dispatched in runs: shared.storage.leased.jobs)
    key: str  # the id column of its rows and entries: a job's `id`, a delivery's `seq`
    # The leading arguments of the statements that find the scope's rows (claim_due, the sweeps'
    # find_expired_*, release_all): the queue, or the group's id.
    claim: tuple[Any, ...]
    where: tuple[Any, ...]  # every other statement's: none for jobs (ids are the table's), the group's id
    done: str  # the statement that finishes a success
    noun: str  # "job", "message"
    place: str  # where, in log lines: "queue default", "topics.orders-billing"
    handler: str  # who returns an Ack: "a job's handler", "a consumer"
    author: str  # ...as a discard's last_error names it: "task", "consumer"
    log: Logger
