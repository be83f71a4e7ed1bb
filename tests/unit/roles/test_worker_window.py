"""The worker's in-flight window per source (worker/pacing.py): fed by flights' outcomes, judged per
round, read by the tick. Time-outs shrink an async source's window, and the worker then keeps no
more of its rows in flight than the window; a plain source keeps the fixed cap."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import cast

import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.shared.api.outcomes import TimedOut
from duecast.shared.entries import Entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.inflight import ROUND_S
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.source_store import SourceStore
from duecast.worker.flight import RAN_OUT, Flight
from duecast.worker.pacing import Tally, Windows
from duecast.worker.worker import Worker
from tests.unit.fakes import FakeWorkStore, rescan_source
from tests.unit.roles.test_worker_inflight import tick_until


@dataclass
class Flown:
    """What Windows reads of a flight: its source, when its rows started, how many are left."""

    source: str
    started: float
    rows: list[int] = field(default_factory=lambda: [0] * 10)
    left: int = 10


def feed(windows: Windows, source: str, started: float, outcomes: list[object], now: float) -> None:
    windows.record(cast(Flight, Flown(source, started)), [(i, o) for i, o in enumerate(outcomes)], now)  # type: ignore[misc]


def test_time_outs_halve_an_async_sources_window_once_per_round() -> None:
    w = Windows({"users": 30.0}, ceiling=1000, pop_batch=100, now=0.0)
    assert w.limit("users") == 1000
    assert w.limit("plain") == 1000  # not adaptive: the cap
    feed(w, "users", -3.8, [Ack.touch()] * 900 + [TimeoutError()] * 10, now=0.2)
    w.judge(0.3, {"users": 1000}, [])
    assert w.limit("users") == 1000  # the round is not over yet
    w.judge(ROUND_S, {"users": 1000}, [])
    assert w.limit("users") == 500  # halved: 1,800 calls/s x 0.5 x 4 s would hold more
    assert w.windows["users"].timeout_s == 4.0  # learnt: the calls time out after 4 s
    # Rows started before the cut say nothing new: their time-outs do not cut again.
    feed(w, "users", 0.1, [TimedOut("users", 4.0)] * 50, now=ROUND_S + 0.1)
    w.judge(2 * ROUND_S, {"users": 500}, [])
    assert w.limit("users") == 500
    # Errors (10% or more of a round) cut too; a round without outcomes changes nothing.
    feed(w, "users", ROUND_S + 0.01, [Ack.touch()] * 900 + [RuntimeError("503")] * 100, now=2 * ROUND_S + 0.1)
    w.judge(3 * ROUND_S, {"users": 500}, [])
    assert w.limit("users") == 250
    w.judge(4 * ROUND_S, {"users": 250}, [])
    assert w.limit("users") == 250


def test_a_cut_goes_down_to_what_the_service_took_in_one_step() -> None:
    """Little's law: 100 successful calls in a 0.5 s round is 200 a second; at half of a 1 s limit,
    100 in flight fit. Rows started before the cut count for the rate too."""
    w = Windows({"users": 30.0}, ceiling=10_000, pop_batch=2000, now=0.0)
    feed(w, "users", -0.9, [Ack.touch()] * 60, now=0.1)
    feed(w, "users", -0.8, [TimeoutError()] * 900 + [Ack.touch()] * 40, now=0.2)
    w.judge(ROUND_S, {"users": 10_000}, [])
    assert w.windows["users"].timeout_s == 1.0
    assert w.limit("users") == 100
    # The rate is the best of recent rounds: one round full of time-outs serving less does not
    # shrink the window below what the service took a round before.
    w = Windows({"users": 30.0}, ceiling=10_000, pop_batch=2000, now=0.0)
    feed(w, "users", -0.5, [Ack.touch()] * 1000, now=0.1)  # 2,000/s, latency 0.6 s
    w.judge(ROUND_S, {"users": 10_000}, [])
    feed(w, "users", -0.5, [TimeoutError()] * 900 + [Ack.touch()] * 10, now=0.6)
    w.judge(2 * ROUND_S, {"users": 10_000}, [])
    assert w.limit("users") == 1100  # 2,000/s x 0.5 x the 1.1 s limit learnt


def lowered_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "worker.window_lowered"]


def failing_every_call(w: Windows, rounds: int) -> None:
    """bench/log_volume.py's service, one round at a time: of each round's rows, 3 fail at once
    (HTTP 500, connection refused) and 1 hangs until its client gives up after 5 s."""
    for k in range(1, rounds + 1):
        now = k * ROUND_S
        feed(
            w,
            "users",
            now - 0.2,
            [RuntimeError("500"), OSError("refused"), RuntimeError("500")],
            now=now - 0.19,
        )
        if now - 0.1 >= 5.0:  # the row that hung, started 5 s before
            feed(w, "users", now - 5.1, [TimeoutError()], now=now - 0.1)
        w.judge(now, {"users": w.limit("users")}, [])


def test_a_window_held_at_one_row_logs_nothing_more(caplog: pytest.LogCaptureFixture) -> None:
    """A service failing every call keeps the window at one row: one line per drop, from what to
    what, then none (every round that saw failures said "lowered to 1 rows" before: 226 lines in
    10 minutes of bench/log_volume.py)."""
    w = Windows({"users": 30.0}, ceiling=8, pop_batch=4, now=0.0)
    with caplog.at_level(logging.INFO, logger="duecast.worker"):
        failing_every_call(w, rounds=40)
    assert w.limit("users") == 1
    assert [re.sub(r": .*", "", line) for line in lowered_lines(caplog)] == [
        "in-flight window of users lowered from 8 to 4 rows",
        "in-flight window of users lowered from 4 to 2 rows",
        "in-flight window of users lowered from 2 to 1 rows",
    ]


def test_time_outs_of_rows_started_before_a_cut_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Quick failures cut the window every round; a call that times out after 5 s started before
    the last cut, so it decides nothing, but it is counted in the round it ends (the lines said "0 of
    N calls timed out" although a quarter of the calls did) and teaches the 5 s limit."""
    w = Windows({"users": 30.0}, ceiling=10_000, pop_batch=100, now=0.0)
    with caplog.at_level(logging.INFO, logger="duecast.worker"):
        failing_every_call(w, rounds=30)
    lines = lowered_lines(caplog)
    assert len(lines) == 13  # halved each round, 10,000 to 1, then held
    assert lines[8].endswith("rows: 0 of 3 calls timed out, 3 failed")  # at 4.5 s, none hung 5 s yet
    assert all(line.endswith("rows: 1 of 4 calls timed out, 3 failed") for line in lines[10:]), lines
    assert w.windows["users"].timeout_s == pytest.approx(5.0)


def test_a_batch_still_awaiting_near_the_time_limit_eases_the_window() -> None:
    """Calls that finish first are the quick ones: the oldest batch with a tenth of its rows still
    awaiting says its tail waits at least its age, before any of its calls time out."""
    w = Windows({"users": 4.0}, ceiling=1000, pop_batch=100, now=0.0)
    feed(w, "users", 9.9, [Ack.touch()] * 500, now=10.0)  # quick ones: 0.1 s
    waiting = [Flown("users", 7.0, left=5), Flown("users", 9.0, left=9), Flown("other", 0.0)]
    w.judge(10.0, {"users": 1000}, cast(list[Flight], waiting))
    assert w.limit("users") == 1000  # 3 s old, half left: between FAST and SLOW x 4 s, holds
    waiting = [Flown("users", 6.9, left=1), Flown("users", 1.0, left=0)]  # all done: not it
    feed(w, "users", 10.4, [Ack.touch()] * 500, now=10.5)
    w.judge(10.5, {"users": 1000}, cast(list[Flight], waiting))
    assert w.limit("users") == 700  # 3.6 s > 0.75 x 4 s: eased


def test_a_used_window_with_fast_calls_grows_back_to_the_cap() -> None:
    w = Windows({"users": 5.0}, ceiling=1000, pop_batch=100, now=0.0)
    w.windows["users"] = w.windows["users"].__class__(400, 5.0, cut_at=0.0)
    now = 0.0
    for _ in range(40):
        feed(w, "users", now, [Ack.touch()] * 10, now=now + 0.05)
        now += ROUND_S
        w.judge(now, {"users": w.limit("users")}, [])
    assert w.limit("users") == 1000


def test_rooms_respect_each_sources_window_and_the_workers_room() -> None:
    w = Windows({"users": 5.0}, ceiling=1000, pop_batch=100, now=0.0)
    w.windows["users"] = w.windows["users"].__class__(120, 5.0)
    rooms = w.rooms({"users": 100, "plain": 100, "idle": 100}, {"users": 60, "plain": 10})
    assert rooms == {"users": 60, "plain": 100, "idle": 100}
    assert w.rooms({"users": 100}, {"users": 110}) == {}  # under a quarter of its window: none
    assert w.rooms({"users": 30}, {"users": 0}) == {"users": 30}
    assert w.rooms({"users": 0, "plain": 50}, {}) == {"plain": 50}  # no room under the cap: none


def test_a_worker_keeps_no_more_in_flight_than_a_cut_window(ready_queue: ReadyQueue) -> None:
    """Every call times out at first (its client gives up after 0.1 s): the window is cut below the
    cap of 40, and the worker keeps at most that many rows in flight; once calls succeed, the
    window grows again and every row is acked."""
    rows = 3000
    store = FakeWorkStore(rescan_source(), dict.fromkeys(range(1, rows + 1), 1))
    healthy = threading.Event()
    peak: list[int] = [0]

    async def check(row: Row) -> None:
        await asyncio.sleep(0.02)  # a quick service...
        if not healthy.is_set():
            await asyncio.sleep(0.08)  # ...whose calls wait until the client gives up
            raise TimeoutError("the client's own timeout")

    settings = WorkerSettings(pop_batch=10, block_timeout_s=0.1, max_in_flight=40)
    stores = cast(dict[str, SourceStore], {"users": store})
    handler = Handler("users", None, batch=False, afn=check)
    worker = Worker(stores, {"users": handler}, ready_queue, settings)  # type: ignore[arg-type]
    ready_queue.push("users", [Entry(i, 1) for i in range(1, rows + 1)])
    try:
        tick_until(worker, lambda: worker.windows.limit("users") <= 10, "the window to be cut twice")
        cut = worker.windows.limit("users")
        tick_until(worker, lambda: worker.in_flight <= cut, "the rows started before the cut to end")
        failed = len(store.failed)

        def within() -> bool:
            peak[0] = max(peak[0], worker.in_flight)
            return len(store.failed) >= failed + 50

        tick_until(worker, within, "more failures under the cut window")
        assert peak[0] <= cut
        healthy.set()
        tick_until(worker, lambda: worker.windows.limit("users") > cut, "the window to grow", timeout_s=30)
        tick_until(worker, lambda: ready_queue.length("users") == 0 and not worker.flights, "the rest acked")
        assert len(store.acked) + len(store.failed) == rows
        # the client's own time-outs count as timed out (duecast status), not only as failed
        tick_until(worker, lambda: worker.counts["failed"] == len(store.failed), "the counts sent")
        assert worker.counts["timed_out"] == worker.counts["failed"] > 0
    finally:
        healthy.set()
        worker.close()


def test_a_rounds_tally_counts_each_kind_of_outcome_and_not_a_call_skipped_for_its_lease() -> None:
    tally = Tally()
    pairs = [
        (0, Ack.default()),
        (1, TimedOut("s", 1.0)),
        (2, TimeoutError()),
        (3, ValueError()),
        (4, RAN_OUT),
    ]
    tally.add(pairs, 0.5, earlier=False)
    tally.add([(5, Ack.default()), (6, RAN_OUT)], 0.5, earlier=True)
    assert (tally.ok, tally.timed_out, tally.failed, tally.served) == (1, 2, 1, 2)
    assert (tally.earlier_ok, tally.earlier_failed, tally.earlier_timed_out) == (1, 0, 0)
    assert tally.latency_sum_s == 0.5
    assert tally.timed_out_after_s == 0.5
