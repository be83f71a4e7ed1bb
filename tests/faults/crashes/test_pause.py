"""Pause and resume a source on real processes: paused, nothing new starts within a second and what
is in flight finishes; the pause holds through a SIGKILL of the worker, a restart of the dispatcher
and a flush of every key of ours in Redis (it is a row in MySQL); resumed, every row runs, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from duecast.shared.api import pauses
from duecast.shared.settings import JobsSettings, Settings
from tests.faults.conftest import FaultEnv

pytestmark = pytest.mark.faults

ROWS = 60
QUIET_S = 1.5  # how long nothing may start while paused (the pause is read every 0.5 s)


def settings_of(env: FaultEnv) -> Settings:
    return Settings(mysql=env.mysql, sources=[env.source], jobs=JobsSettings(enabled=False))


def executed(env: FaultEnv) -> int:
    return len(env.executions())


def assert_nothing_starts(env: FaultEnv, for_s: float) -> None:
    """For `for_s`, polled every 50 ms: no execution begins (the count of the log stays put)."""
    before = executed(env)
    until = time.monotonic() + for_s
    while time.monotonic() < until:
        env.procs.check()
        assert executed(env) == before, "a paused source started a check"
        time.sleep(0.05)


def flush_our_keys(env: FaultEnv) -> int:
    """Delete every key under this test's prefix (other tests' keys are not ours to flush)."""
    keys = list(env.redis.scan_iter(match=f"{{{env.keys.prefix}}}*", count=1000))
    return int(env.redis.delete(*keys)) if keys else 0


def test_paused_within_a_second_through_a_kill_and_a_flush_and_resumed_nothing_lost(
    fault_env: Callable[..., FaultEnv],
) -> None:
    env = fault_env("oneoff")
    ids = env.insert(ROWS)
    settings = settings_of(env)
    dispatcher = env.dispatcher()
    worker = env.worker("first", DUECAST_WORKER__POP_BATCH=5, DUECAST_TEST_ROW_DELAY_MS=40)
    env.wait_for(lambda: executed(env) >= 5, "the first checks")

    assert pauses.pause(settings, "source", env.source.name)
    paused_at = time.monotonic()
    assert not pauses.pause(settings, "source", env.source.name)  # already paused: kept as it was
    # What is in flight finishes (a batch of 5 rows of 40 ms), then nothing more starts.
    env.wait_for(lambda: not [r for r in env.rows().values() if r[0] == 2], "the batch in flight to finish")
    assert time.monotonic() - paused_at < 1.0 + 0.5  # the last batch popped before the pause took
    time.sleep(max(0.0, paused_at + 1.0 - time.monotonic()))  # the second the pause may take
    assert_nothing_starts(env, QUIET_S)
    halted_at = executed(env)
    assert halted_at < ROWS

    # Every role restarts and Redis forgets us: the pause is in MySQL, so it holds.
    env.procs.kill(worker)
    env.procs.kill(dispatcher)
    flush_our_keys(env)
    env.dispatcher("dispatcher-2")
    env.worker("second", DUECAST_WORKER__POP_BATCH=5)
    assert [p.name for p in pauses.paused(settings)] == [env.source.name]
    assert_nothing_starts(env, QUIET_S + 1.0)
    assert executed(env) == halted_at

    assert pauses.resume(settings, "source", env.source.name)
    assert not pauses.resume(settings, "source", env.source.name)
    env.wait_for(lambda: not env.pending(), "every row to run once resumed")

    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.duplicates
    assert not verdict.unexpected
    assert not verdict.redundant  # the kill found nothing in flight: no row ran twice
