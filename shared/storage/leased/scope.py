"""How a leased store names its work (Naming), and for per-row units which rows its statements touch
(Scope). Data only; the stores in store.py, row_units.py and run_units.py run the statements."""

from __future__ import annotations

from dataclasses import dataclass
from logging import Logger
from typing import Any

from ...queries.topics import TopicSQL


@dataclass(frozen=True)
class Naming:
    """How a leased store's rows are keyed, and how its log lines and last_errors name them."""

    key: str  # the id column of the rows handlers get: a job's `id`, a delivery's `seq`
    noun: str  # "job", "message"
    place: str  # where, in log lines: "queue default", "topics.orders-billing"
    handler: str  # who returns an Ack: "a job's handler", "a consumer"
    author: str  # ...as a discard's last_error names it: "task", "consumer"
    log: Logger


@dataclass(frozen=True)
class Scope(Naming):
    """What a per-row leased store's statements touch. Every statement takes its SET values first,
    then the scope's `where` arguments, then its own."""

    sql: TopicSQL  # the kind's catalog (job queues are dispatched in runs: run_units.py)
    # The leading arguments of the statements that find the scope's rows (claim_due, the sweeps'
    # find_expired_*, release_all): the group's id.
    claim: tuple[Any, ...]
    where: tuple[Any, ...]  # every other statement's: the group's id
    done: str  # the statement that finishes a success
