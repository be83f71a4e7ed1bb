"""The soak's limited task beside the other jobs: `limited` (tests/chaos/app.py) under
`[jobs.task_limits.limited] max_running`, its jobs spread over a few concurrency keys (each job's
payload names its key), and the record of every one acked: a trigger on the jobs table, as the
task is async and cannot write in its ack transaction. This module owns that section and trigger;
the jobs' checker judges these jobs as it judges `work`, limits_checker their concurrency.

A key-limited task is this one with `per_key` set (`max_running_per_key`) and the key passed at
enqueue as well as in the payload (`job`): the checker already counts per key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duecast.shared.api.enqueue import Job
from duecast.shared.settings import DispatcherSettings
from duecast.shared.storage.limits import task_limit_name
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
    max_running: int = 6
    keys: int = 3
    per_key: int | None = None  # max_running_per_key, once the task limits take it

    def limits(self) -> dict[str, dict[str, int]]:
        """`jobs.task_limits`."""
        section = {"max_running": self.max_running}
        if self.per_key is not None:
            section["max_running_per_key"] = self.per_key
        return {LIMITED: section}

    def job(self, n: int) -> Job:
        """Job number `n`, of key k0 .. k<keys-1> in turn."""
        return Job(LIMITED, {"n": n, "key": f"k{n % self.keys}"})

    def create_trigger(self) -> None:
        """The task's ack is its finish's DELETE of the job's row (jobs.retention_s = 0): recorded in
        that transaction, so it lands if and only if the finish does. (A row is deleted once: a second
        ack of one job cannot happen here; `work`'s record is the one that would show it.)"""
        self.query(
            f"CREATE TRIGGER `{self.jobs_table}_limited_ack` AFTER DELETE ON `{self.jobs_table}` "
            f"FOR EACH ROW IF OLD.task = '{LIMITED}' THEN INSERT INTO `{self.acks}` (n, unit, pid, at) "
            "VALUES (JSON_VALUE(OLD.payload, '$.n'), OLD.id, 0, UNIX_TIMESTAMP(NOW(6))); END IF"
        )

    def drop(self) -> None:
        """Its bucket row (the trigger goes with the jobs table)."""
        table = DispatcherSettings().limits_table
        self.query(f"DELETE FROM `{table}` WHERE name = %s", (task_limit_name(LIMITED),))

    def verdict(self, faults: Sequence[Fault]) -> RunningVerdict:
        """Read once every process has stopped."""
        return judge_running(read_calls(self.log), faults, self.max_running, self.per_key)
