"""The soak's key-limited task beside the other jobs: `limited` (tests/chaos/app.py) in a queue of its
own under `[jobs.key_limits.limited] max_running_per_key`, its jobs spread over a few concurrency
keys (given at enqueue, and named in each job's payload for the handler's record), and the record of
every one acked: a trigger on the jobs table, as the task is async and cannot write in its ack
transaction. This module owns that queue's settings and the trigger; the jobs' checker judges these
jobs as it judges `work`, limits_checker their concurrency per key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duecast.shared.api.enqueue import Job
from tests.chaos.app import LIMITED
from tests.chaos.checker import Fault
from tests.chaos.limits_checker import RunningVerdict, judge_running, read_calls

Query = Callable[..., list[tuple[Any, ...]]]


@dataclass
class LimitedTask:
    query: Query  # the harness' autocommit session
    jobs_table: str
    acks: str  # the jobs' acks record (group.acks_table), shared with `work`
    log: Path  # DUECAST_CHAOS_LIMITED_LOG: its calls' starts and ends
    keys: int = 3
    per_key: int = 2  # max_running_per_key: at most keys x per_key of its calls run at once

    queue = "limited"

    def jobs_settings(self, jobs: dict[str, Any]) -> dict[str, Any]:
        """`jobs` with the task's queue and its key limit added."""
        queues = [*jobs.get("queues", ["default"]), self.queue]
        return {**jobs, "queues": queues, "key_limits": {self.queue: {"max_running_per_key": self.per_key}}}

    def job(self, n: int) -> Job:
        """Job number `n`, of key k0 .. k<keys-1> in turn."""
        key = f"k{n % self.keys}"
        return Job(LIMITED, {"n": n, "key": key}, queue=self.queue, concurrency_key=key)

    def create_trigger(self) -> None:
        """The task's ack is its finish's DELETE of the job's row (jobs.retention_s = 0): recorded in
        that transaction, so it lands if and only if the finish does. (A row is deleted once: a second
        ack of one job cannot happen here; `work`'s record is the one that would show it.)"""
        self.query(
            f"CREATE TRIGGER `{self.jobs_table}_limited_ack` AFTER DELETE ON `{self.jobs_table}` "
            f"FOR EACH ROW IF OLD.task = '{LIMITED}' THEN INSERT INTO `{self.acks}` (n, unit, pid, at) "
            "VALUES (JSON_VALUE(OLD.payload, '$.n'), OLD.id, 0, UNIX_TIMESTAMP(NOW(6))); END IF"
        )

    def verdict(self, faults: Sequence[Fault]) -> RunningVerdict:
        """Read once every process has stopped."""
        return judge_running(read_calls(self.log), faults, None, self.per_key)
