"""dispatcher.scheduler: the dispatcher's duties under the roles' loop. A duty's tick sets its pace; a
singleton runs only while leading; a failed tick waits an interval; each duty has a thread of its own,
ended by `stop()` (at once, even mid-wait) or, draining, by its first idle tick."""

from __future__ import annotations

import logging
import threading

import pytest

from duecast.dispatcher.scheduler import Every, Guarded, Led, Running
from duecast.shared.process.loop import Tick


class Scripted:
    """A duty that plays back ticks, then reports idle; records which threads ran it."""

    def __init__(self, name: str, ticks: list[Tick | Exception]) -> None:
        self.name = name
        self.ticks = ticks
        self.calls = 0
        self.threads: set[str] = set()

    def tick(self) -> Tick:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        step = self.ticks.pop(0) if self.ticks else Tick(60.0, idle=True)
        if isinstance(step, Exception):
            raise step
        return step


def test_a_singleton_duty_runs_only_while_leading() -> None:
    duty, leading = Scripted("pruner", [Tick(0.0, idle=False)]), [False]
    led = Led(duty, lambda: leading[0], every_s=5.0)
    assert led.tick() == Tick(5.0, idle=True)  # standing by: look again an interval later
    assert duty.calls == 0
    leading[0] = True
    assert led.tick() == Tick(0.0, idle=False)  # leading: the duty's own pace
    assert (duty.calls, led.name) == (1, "pruner")


def test_a_failed_tick_is_logged_and_waits_an_interval(caplog: pytest.LogCaptureFixture) -> None:
    duty = Scripted("ranges", [RuntimeError("bug"), Tick(2.0, idle=True)])
    guarded = Guarded(duty, every_s=7.0, stop=threading.Event())
    with caplog.at_level(logging.WARNING):
        assert guarded.tick() == Tick(7.0, idle=True)
    assert [getattr(r, "event", None) for r in caplog.records] == ["scheduler.duty_failed"]
    assert "duecast-ranges failed; will retry at the next interval" in caplog.records[0].getMessage()
    assert guarded.tick() == Tick(2.0, idle=True)


def test_a_stopping_process_runs_no_more_duty_ticks() -> None:
    duty, stop = Scripted("topics", []), threading.Event()
    stop.set()
    assert Guarded(duty, every_s=3.0, stop=stop).tick() == Tick(3.0, idle=True)
    assert duty.calls == 0


def test_a_plain_call_runs_every_interval() -> None:
    calls: list[int] = []
    every = Every("gauges", lambda: calls.append(1), every_s=4.0)
    assert (every.tick(), every.tick(), every.name) == (Tick(4.0, idle=True), Tick(4.0, idle=True), "gauges")
    assert calls == [1, 1]


def test_draining_runs_each_duty_in_its_own_thread_until_idle() -> None:
    a = Scripted("a", [Tick(0.0, idle=False), Tick(0.0, idle=False)])
    b = Scripted("b", [])
    running = Running(drain=True)
    running.start(a, first_s=600.0)  # draining does not wait for the first interval
    running.start(b)
    running.join()
    assert (a.calls, b.calls) == (3, 1)
    assert (a.threads, b.threads) == ({"duecast-a"}, {"duecast-b"})


def test_stop_ends_the_waits_and_joins_every_thread() -> None:
    ticked = threading.Event()

    class Once(Scripted):
        def tick(self) -> Tick:
            ticked.set()
            return super().tick()  # then waits 60 s, which stop() cuts short

    waiting, pacing = Scripted("waiting", []), Once("pacing", [])
    running = Running()
    running.start(waiting, first_s=600.0)  # its first tick is an interval away: never reached
    running.start(pacing)
    assert ticked.wait(10.0)
    running.stop()
    assert not any(t.is_alive() for t in running.threads)
    assert (waiting.calls, pacing.calls) == (0, 1)
