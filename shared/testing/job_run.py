"""One run of a job with no server, decided as the worker decides it: the task's route and time limit
(Registry), the checks its Ack passes (storage.leased.batch.finish_group), the error text kept
(error_text) and the next attempt's delay (shared.policy). Returns the Finish; keeps no state.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..acks import Ack, Row
from ..api.handlers import Handler, Registry
from ..api.outcomes import InvalidAck
from ..limits import shown
from ..policy import dead_after_failure, retry_delay_s
from ..settings import JOBS_SOURCE, JobsSettings
from ..storage.leased.batch import error_text, finish_group
from .calls import Outcome, TestingError, as_outcome, on_loop, on_thread, run_coroutine

WHO = "a job's handler"  # as the jobs store names it (storage/leased/jobs.py Naming)


@dataclass(frozen=True)
class Finish:
    """How one run ended: "done", "retried" (pending again after delay_s or at `at`) or "dead"."""

    state_word: str
    errors: int = 0  # 1 when the run failed
    text: str | None = None  # last_error to keep (None: unchanged)
    delay_s: float = 0.0
    at: datetime | None = None  # naive UTC
    error: BaseException | None = None
    result: str | None = None  # done with a value: the task's result, as JSON text


class JobRun:
    """Runs one job row through a Registry and decides its Finish."""

    def __init__(
        self, registry: Registry | None, jobs: JobsSettings, cursor: Any, rng: random.Random
    ) -> None:
        self.registry = registry
        self.jobs = jobs
        self.cursor = cursor
        self.rng = rng

    def run(self, row: Row) -> Finish:
        handler, on_event_loop, limit_s = self._plan(row)
        if on_event_loop:
            outcome = run_coroutine(lambda: handler.run_one(dict(row)), limit_s, JOBS_SOURCE)
        else:
            outcome = on_thread(lambda: _first(handler.run([dict(row)])), limit_s, JOBS_SOURCE)
        return self.decide(row, as_outcome(outcome))

    async def arun(self, row: Row) -> Finish:
        handler, on_event_loop, limit_s = self._plan(row)
        if on_event_loop:
            outcome = await on_loop(lambda: handler.run_one(dict(row)), limit_s, JOBS_SOURCE)
        else:
            outcome = await asyncio.to_thread(
                on_thread, lambda: _first(handler.run([dict(row)])), limit_s, JOBS_SOURCE
            )
        return self.decide(row, as_outcome(outcome))

    def decide(self, row: Row, outcome: Outcome) -> Finish:
        if isinstance(outcome, Ack) and outcome.action == "transaction":
            outcome = self._transaction(outcome)
        if isinstance(outcome, Ack):
            try:
                finish_group(outcome, WHO)
            except ValueError as exc:  # as the worker's acker makes it (worker/acker.py)
                return self._failed(row, InvalidAck(f"{exc}; the ack was {shown(outcome)}"))
            if outcome.action == "discard":
                reason = f": {outcome.reason}" if outcome.reason else ""
                return Finish("dead", text=f"discarded by its task{reason}")
            if outcome.action == "retry":
                return Finish("retried", delay_s=outcome.delay_s, at=outcome.at)
            return Finish("done", result=outcome.result)
        return self._failed(row, outcome)

    def _failed(self, row: Row, outcome: object) -> Finish:
        """A failed run: dead once it uses up max_attempts, else pending after the backoff."""
        text = error_text(outcome)
        error = outcome if isinstance(outcome, BaseException) else None
        errors = int(row["errors"])
        if dead_after_failure(errors, int(row["max_attempts"])):
            return Finish("dead", 1, text, error=error)
        delay_s = retry_delay_s(errors + 1, self.jobs.retry_base_s, self.jobs.retry_cap_s, self.rng)
        return Finish("retried", 1, text, delay_s, error=error)

    def _transaction(self, ack: Ack) -> Outcome:
        """A transactional task's work on the test's cursor; its result checked as the worker's."""
        if self.cursor is None:
            raise TestingError(
                "a transactional task needs a cursor: give duecast.testing.Jobs(cursor=...) a DB-API "
                "cursor (or a stand-in) for its writes"
            )
        assert ack.work is not None
        try:
            result = ack.work(self.cursor)
        except Exception as exc:
            return exc
        final = Ack.default() if result is None else result
        if not isinstance(final, Ack) or final.action in ("touch", "transaction"):
            return TypeError(f"a task must return None, Ack.retry or Ack.discard, not {final!r}")
        return final

    def _plan(self, row: Row) -> tuple[Handler, bool, float]:
        if self.registry is None:
            raise TestingError("running jobs needs the app's Registry: duecast.testing.Jobs(registry)")
        try:
            handler = self.registry.handler(JOBS_SOURCE)
        except KeyError:
            raise TestingError("the Registry given to duecast.testing.Jobs registers no task") from None
        on_event_loop, own_limit = handler.plan(row)
        return handler, on_event_loop, own_limit if own_limit is not None else self.jobs.timeout_s


def _first(outcomes: list[Outcome]) -> Outcome:
    return outcomes[0]
