"""The jobs contract (tests/unit/jobs_contract.py) through duecast.testing.Jobs: no server at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from duecast.testing import Jobs
from tests.unit import jobs_contract
from tests.unit.jobs_contract import SCENARIOS, Seen


class FakeDriver:
    def __init__(self) -> None:
        self.jobs = Jobs(jobs_contract.tasks, seed=1)

    def enqueue(self, task: str, payload: Any = None, **options: Any) -> int:
        return self.jobs.enqueue(task, payload, **options)

    def settle(self) -> None:
        self.jobs.drain()

    def seen(self, job_id: int) -> Seen:
        job = self.jobs.get(job_id)
        return Seen(job.state, job.errors, job.last_error, job.result)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_contract(scenario: Callable[[FakeDriver], None]) -> None:
    jobs_contract.RUNS.clear()
    scenario(FakeDriver())
