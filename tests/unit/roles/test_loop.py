"""duecast.shared.process.loop.run: the one loop of every role, driven by a scripted role.

Pacing is observed through a stop event whose wait() records the delay and returns at once, so
these tests check every delay without sleeping; the few that use a real Event wait milliseconds.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterable

import pymysql
import pytest
import redis

from duecast.shared.fanout.protocol import QueueUnavailable
from duecast.shared.process.loop import PROBE_EVERY_S, Tick, run, stop_on_signals

BUSY = Tick(0.0, idle=False)


class Stop:
    """Script step: set the stop event and return a busy tick."""


class RecordingStop(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


class ScriptedRole:
    name = "scripted"

    def __init__(self, stop: threading.Event, script: Iterable[Tick | BaseException | Stop]) -> None:
        self.stop = stop
        self.script = list(script)
        self.calls = 0
        self.overran = False  # the loop asked for more ticks than the script had

    def tick(self) -> Tick:
        self.calls += 1
        if not self.script:
            self.overran = True
            self.stop.set()  # never raise here: run() would catch it and keep looping
            return BUSY
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, Stop):
            self.stop.set()
            return BUSY
        return step


def test_drain_exits_at_the_first_idle_tick() -> None:
    stop = RecordingStop()
    role = ScriptedRole(stop, [BUSY, Tick(0.2, idle=False), Tick(0.3, idle=True), BUSY])
    run(role, stop, drain=True)
    assert role.calls == 3
    assert not role.overran
    assert stop.waits == [0.2]  # the idle tick's own delay is not slept: drain returns at once
    assert not stop.is_set()


def test_without_drain_idle_ticks_just_pace_the_loop() -> None:
    stop = RecordingStop()
    role = ScriptedRole(stop, [Tick(0.5, idle=True), Tick(0.7, idle=True), BUSY, Stop()])
    run(role, stop)
    assert role.calls == 4
    assert not role.overran
    assert stop.waits == [0.5, 0.7]  # zero delays are not waited at all


def test_stop_set_before_run_means_no_tick() -> None:
    stop = RecordingStop()
    stop.set()
    role = ScriptedRole(stop, [BUSY])
    run(role, stop)
    assert role.calls == 0


def test_stop_during_a_tick_ends_the_loop_without_waiting_its_delay() -> None:
    stop = threading.Event()

    class LongDelay(ScriptedRole):
        def tick(self) -> Tick:
            self.calls += 1
            self.stop.set()
            return Tick(3600.0, idle=False)

    role = LongDelay(stop, [])
    started = time.monotonic()
    run(role, stop)
    assert role.calls == 1
    assert time.monotonic() - started < 5.0


def test_stop_interrupts_the_sleep_between_ticks() -> None:
    """SIGTERM's handler only sets the event: the loop must wake from a long delay at once."""
    stop = threading.Event()
    ticked = threading.Event()

    class Slow:
        name = "slow"
        calls = 0

        def tick(self) -> Tick:
            self.calls += 1
            ticked.set()
            return Tick(3600.0, idle=False)

    role = Slow()
    thread = threading.Thread(target=run, args=(role, stop), daemon=True)
    thread.start()
    assert ticked.wait(5.0)
    stop.set()
    thread.join(5.0)
    assert not thread.is_alive()
    assert role.calls == 1


def test_exceptions_are_counted_backed_off_and_reset(caplog: pytest.LogCaptureFixture) -> None:
    stop = RecordingStop()
    role = ScriptedRole(
        stop,
        [
            RuntimeError("a"),
            RuntimeError("b"),
            RuntimeError("c"),
            Tick(0.1, idle=False),
            RuntimeError("d"),
            Stop(),
        ],
    )
    with caplog.at_level(logging.ERROR, logger="duecast.loop"):
        run(role, stop, error_base_s=0.5, error_cap_s=10.0)
    assert role.calls == 6
    assert not role.overran
    assert None not in stop.waits
    w1, w2, w3, ok, w5 = (w or 0.0 for w in stop.waits)
    assert 0.25 <= w1 <= 0.5
    assert 0.5 <= w2 <= 1.0
    assert 1.0 <= w3 <= 2.0
    assert ok == 0.1
    assert 0.25 <= w5 <= 0.5  # a good tick resets the count
    failed = [r.getMessage() for r in caplog.records if "tick failed" in r.getMessage()]
    assert [m.split("(")[1].split(")")[0] for m in failed] == [
        "1 in a row",
        "2 in a row",
        "3 in a row",
        "1 in a row",
    ]
    assert all(r.exc_info is not None for r in caplog.records if "tick failed" in r.getMessage())


def test_backoff_respects_the_cap() -> None:
    stop = RecordingStop()
    role = ScriptedRole(stop, [*[RuntimeError("x") for _ in range(12)], Stop()])
    run(role, stop, error_base_s=0.5, error_cap_s=2.0)
    waits = [w for w in stop.waits if w is not None]
    assert len(waits) == 12
    assert all(w <= 2.0 for w in waits)
    assert all(w >= 1.0 for w in waits[2:])  # ceiling reached after three failures


def test_errors_do_not_end_a_drain_and_real_waits_stay_tiny() -> None:
    stop = threading.Event()
    role = ScriptedRole(stop, [RuntimeError("db down"), RuntimeError("db down"), Tick(0.0, idle=True)])
    started = time.monotonic()
    run(role, stop, drain=True, error_base_s=0.001, error_cap_s=0.002)
    assert role.calls == 3
    assert not role.overran
    assert time.monotonic() - started < 1.0


def test_base_exceptions_escape_the_loop() -> None:
    stop = RecordingStop()
    role = ScriptedRole(stop, [KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        run(role, stop)
    assert role.calls == 1


def test_stop_on_signals_sets_the_event() -> None:
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            stop = threading.Event()
            stop_on_signals(stop)
            os.kill(os.getpid(), sig)
            # The handler runs in the main thread between bytecodes; the wait just yields to it.
            assert stop.wait(5.0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_stop_signal_that_comes_while_the_main_thread_holds_the_events_lock_still_stops() -> None:
    """A handler runs in the main thread between two of its bytecodes, wherever it is: here, inside
    the stop Event's own lock, as inside its wait(). A handler that set the Event itself waited on
    that lock forever (the role never stopped); it only rings a bell, and a thread sets the Event."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop = threading.Event()
        stop_on_signals(stop)
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        with stop._cond:  # type: ignore[attr-defined]  # the lock Event.wait() and set() take
            handler(signal.SIGTERM, None)  # returns: it took no lock
        assert stop.wait(5.0)
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize(
    "transient",
    [
        pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1' ([Errno 111])"),
        pymysql.err.OperationalError(1040, "Too many connections"),
        pymysql.err.InterfaceError(0, ""),
        redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    ],
    ids=["mysql-down", "too-many-connections", "connection-gone", "redis-down"],
)
def test_a_transient_failure_is_one_warning_line_with_its_cause_and_no_traceback(
    transient: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    stop = RecordingStop()
    with caplog.at_level(logging.DEBUG, logger="duecast.loop"):
        run(ScriptedRole(stop, [transient, RuntimeError("a bug"), Stop()]), stop)

    (server, bug) = [r for r in caplog.records if "tick failed" in r.getMessage()]
    assert (server.levelname, server.exc_info) == ("WARNING", None)
    assert server.getMessage().endswith(f"{type(transient).__name__}: {' '.join(str(transient).split())}")
    assert "\n" not in server.getMessage()
    # Anything else is unexpected: an ERROR with its traceback.
    assert bug.levelname == "ERROR"
    assert bug.exc_info is not None


class Probe:
    """The queue's PING, scripted: raises `down` times, then answers."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.down:
            raise QueueUnavailable("ConnectionError: Connection refused")


def test_the_backoff_after_redis_failed_ends_once_redis_answers() -> None:
    """Issue 24.10: requeueing waited out a 5-10 s backoff after Redis answered again."""
    stop = RecordingStop()
    role = ScriptedRole(stop, [QueueUnavailable("ConnectionError: refused"), BUSY, Stop()])
    probe = Probe(down=2)
    run(role, stop, error_base_s=20.0, error_cap_s=20.0, probe=probe)
    assert role.calls == 3
    assert probe.calls == 3  # two answered with an error, the third one answered: tick again
    assert stop.waits == [PROBE_EVERY_S] * 3  # one probe per interval, never a 10-20 s sleep


def test_the_backoff_after_any_other_failure_is_not_cut_short_by_the_probe() -> None:
    stop = RecordingStop()
    role = ScriptedRole(stop, [pymysql.err.OperationalError(2013, "Lost connection"), Stop()])
    probe = Probe(down=0)
    run(role, stop, error_base_s=20.0, error_cap_s=20.0, probe=probe)
    assert probe.calls == 0  # Redis answering says nothing about MySQL
    assert len(stop.waits) == 1
    assert stop.waits[0] is not None
    assert stop.waits[0] >= 10.0
