"""Redelivery's lines name what they requeued and why (issue 24.7): rows, ranges, jobs or messages,
never "runs"; and work whose lease ran out is not "not acked within the visibility timeout"."""

from __future__ import annotations

import logging

import pytest

from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.policy import Cause
from tests.unit.fakes import FakeSweepStore, rescan_source
from tests.unit.roles.redelivery_support import SWEEP_S, _redelivery


class LeaseEnded(FakeSweepStore):
    """`n` started units whose lease ran out, `per_entry` rows each (range mode: a range)."""

    def __init__(self, n: int, per_entry: int = 1) -> None:
        super().__init__(rescan_source("users"))
        self.n = n
        self.rows_per_entry = per_entry

    def requeue_interrupted(self, limit: int) -> int:
        n, self.n = self.n, 0
        return n


INTERRUPTED: dict[Cause, float] = {"interrupted": SWEEP_S}


@pytest.mark.parametrize(("per_entry", "said"), [(1, "4 rows"), (100, "4 ranges")])
def test_lease_ended_work_is_named_in_its_own_units(
    ready_queue: ReadyQueue, caplog: pytest.LogCaptureFixture, per_entry: int, said: str
) -> None:
    with caplog.at_level(logging.WARNING, "duecast.redelivery"):
        _redelivery([LeaseEnded(4, per_entry)], ready_queue, INTERRUPTED).tick()
    (record,) = caplog.records
    assert record.getMessage() == f"requeued {said} of users whose lease ran out"
    assert record.event == "redelivery.interrupted"  # type: ignore[attr-defined]
