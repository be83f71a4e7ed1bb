"""The vocabulary every topic statement is built from: delivery states as SQL numbers, the columns a
worker and an operator read, and the quoted table names of one topics configuration (TopicNames).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from ..settings import TopicsSettings
from ..states import State

# Named one by one: State has a jobs-only value (CANCELLED) deliveries never take.
IDLE, DISPATCHED, RUNNING, DONE, DEAD = (
    int(s) for s in (State.IDLE, State.DISPATCHED, State.RUNNING, State.DONE, State.DEAD)
)
UNFINISHED = f"{IDLE}, {DISPATCHED}, {RUNNING}"
# What a worker reads of a delivery it starts (the message's own columns are read apart, unlocked).
DELIVERY_COLUMNS = ("seq", "dc_attempt", "errors", "interruptions")
MESSAGE_COLUMNS = ("seq", "msg_key", "payload", "created_at")
TRACE_COLUMNS = (
    "dc_state",
    "dc_attempt",
    "errors",
    "interruptions",
    "replays",
    "run_at",
    "dc_dispatched_at",
    "started_at",
    "worker",
    "finished_at",
    "last_error",
)
ATTEMPT_COLUMNS = ("attempt", "outcome", "worker", "dispatched_at", "started_at", "ended_at", "error")


@dataclass(frozen=True)
class TopicNames:
    """The quoted topic tables and the fragments their statements share."""

    t: str
    m: str
    g: str
    d: str
    a: str
    mb: str
    one_group: str
    running: str
    finished: str
    revive: str
    msg_cols: str


def topic_names(topics: TopicsSettings) -> TopicNames:
    t, m, g = (quote(topics.table(k)) for k in ("topics", "messages", "groups"))
    d, a, mb = (quote(topics.table(k)) for k in ("deliveries", "attempts", "members"))
    # A delivery of group %s matched by `{where}` (a fence or an id list) in state `{state}`.
    one_group = "`group_id` = %s AND {where}"
    running = f"{one_group} AND `dc_state` = {RUNNING}"
    finished = "`finished_at` = NOW(6), `lease_until` = NULL"
    revive = "`dc_state` >= " + str(DONE)  # done or dead: a replay makes these pending again
    msg_cols = ", ".join(quote(c) for c in MESSAGE_COLUMNS)
    return TopicNames(
        t=t,
        m=m,
        g=g,
        d=d,
        a=a,
        mb=mb,
        one_group=one_group,
        running=running,
        finished=finished,
        revive=revive,
        msg_cols=msg_cols,
    )
