"""The jobs contract (tests/unit/jobs_contract.py) through real MariaDB and Redis, a dispatcher and
a worker: what duecast.testing.Jobs does in tests/unit/testing is what a worker does here."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.states import STATE_NAMES, State
from tests.integration.jobs.jobs_env import JobsEnv
from tests.unit import jobs_contract
from tests.unit.jobs_contract import SCENARIOS, Seen

APP = "tests.unit.jobs_contract:tasks"
ROUNDS = 20  # dispatch-and-drain rounds before a scenario's jobs must have settled


class RealDriver:
    def __init__(self, env: JobsEnv) -> None:
        # Done jobs are kept (retention) so that their state can be read; no task check at enqueue,
        # as an Enqueuer made without `tasks`.
        self.env = env.with_jobs(retention_s=3600).with_app(APP, frozenset())
        self.enqueuer = Enqueuer(self.env.settings, connect_redis(self.env.settings.redis), None)

    def enqueue(self, task: str, payload: Any = None, **options: Any) -> int:
        return self.enqueuer.enqueue(task, payload, **options)

    def settle(self) -> None:
        table = self.env.table
        for _ in range(ROUNDS):
            self.env.run_once()
            self.env.sql.execute(f"SELECT COUNT(*) FROM `{table}` WHERE dc_state = {int(State.IDLE)}")
            if self.env.sql.fetchone()[0] == 0:
                return
            self.env.make_due()  # time passes: delays and backoff are over
        raise AssertionError(f"jobs still pending after {ROUNDS} rounds")

    def seen(self, job_id: int) -> Seen:
        state, errors, last_error, result = self.env.job(job_id, "dc_state", "errors", "last_error", "result")
        value = None if result is None else json.loads(result)
        return Seen(STATE_NAMES[State(state)], int(errors), last_error, value)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_contract(env: JobsEnv, scenario: Callable[[RealDriver], None]) -> None:
    jobs_contract.RUNS.clear()
    scenario(RealDriver(env))
