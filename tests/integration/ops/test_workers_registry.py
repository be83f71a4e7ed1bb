"""The worker registry and redelivery's "held" cause on real MariaDB + Redis: workers register and
beat; one whose heartbeat is older than dead_after_s (back-dated in SQL) is dead, and the batch it
had popped goes back to pending at once, fenced, while a live worker's batch is left alone."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.fanout.keys import encode_entry
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.schema import workers_table_ddl
from duecast.shared.storage.worker_registry import Heartbeat, WorkerRegistry
from tests.integration.conftest import Env
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def registry(make_env: Callable[..., Env]) -> Iterator[tuple[Env, WorkerRegistry]]:
    env = make_env("rescan", rows=30)
    settings = WorkerSettings(registry_table=f"workers_{env.table[-8:]}", heartbeat_s=1, dead_after_s=15)
    env.sql.execute(workers_table_ddl(settings.registry_table))
    reg = WorkerRegistry(Database(env.settings.mysql), settings)
    yield env, reg
    reg.db.close()
    env.sql.execute(f"DROP TABLE IF EXISTS `{settings.registry_table}`")


def _reaper(env: Env, reg: WorkerRegistry) -> Redelivery:
    return Redelivery([env.store], env.queue, {"held": reg.settings.heartbeat_s}, 100, registry=reg)


def silence(env: Env, reg: WorkerRegistry, name: str, seconds: float) -> None:
    env.sql.execute(
        f"UPDATE `{reg.settings.registry_table}` SET heartbeat_at = NOW(6) - INTERVAL %s MICROSECOND "
        "WHERE name = %s",
        (round(seconds * 1e6), name),
    )


def test_a_silent_workers_held_batch_is_requeued_at_once_and_a_live_ones_is_not(
    registry: tuple[Env, WorkerRegistry],
) -> None:
    env, reg = registry
    entries = env.store.claim_due(30)
    dead_batch, live_batch = entries[:10], entries[10:20]
    reg.register("dead-worker", [env.source.name])
    reg.register("live-worker", [env.source.name])
    env.queue.push(env.source.name, dead_batch + live_batch)
    assert env.queue.pop_held("dead-worker", [env.source.name], 10, 1.0) is not None
    assert env.queue.pop_held("live-worker", [env.source.name], 10, 1.0) is not None
    reaper = _reaper(env, reg)
    assert reaper.requeue("held") == 0  # both beat recently
    silence(env, reg, "dead-worker", 16)

    assert reaper.requeue("held") == 10
    states = env.states()
    assert {states[e.id] for e in dead_batch} == {(0, 1)}  # pending again now, no timeout waited
    assert {states[e.id] for e in live_batch} == {(1, 1)}  # still its worker's
    assert env.queue.held_by("dead-worker") is None
    assert [w.name for w in reg.alive()] == ["live-worker"]
    assert reaper.requeue("held") == 0  # forgotten once requeued


def test_a_reaped_batchs_late_ack_is_fenced_off(registry: tuple[Env, WorkerRegistry]) -> None:
    env, reg = registry
    entries = env.store.claim_due(5)
    reg.register("w", [env.source.name])
    env.queue.push(env.source.name, entries)
    assert env.queue.pop_held("w", [env.source.name], 5, 1.0) == (
        env.source.name,
        [encode_entry(e.id, e.attempt) for e in entries],
    )
    silence(env, reg, "w", 60)
    _reaper(env, reg).requeue("held")
    again = env.store.claim_due(5)  # re-claimed under attempt 2
    assert {e.attempt for e in again} == {2}
    with env.store.started(entries) as batch:  # the "dead" worker wakes up with attempt 1
        assert batch.rows == []
        assert batch.skipped == 5


def test_a_heartbeat_registers_beats_and_leaves(registry: tuple[Env, WorkerRegistry]) -> None:
    env, reg = registry
    beat = Heartbeat(env.settings.mysql, reg.settings, [env.source.name, "jobs.default"], {"b, c", "a"})
    beat.start()
    try:
        (me,) = reg.alive()
        assert (me.name, me.sources) == (beat.name, f"{env.source.name},jobs.default")
        assert me.tasks == {"a", "b, c"}  # names with commas survive
        assert reg.served_tasks() == {"jobs.default": {"a", "b, c"}}
        silence(env, reg, beat.name, 10)
        assert reg.alive()[0].silent_s >= 10

        def beaten() -> bool:
            return bool(reg.alive()) and reg.alive()[0].silent_s < 5

        wait_until(beaten, "the next heartbeat")
    finally:
        beat.stop()
    assert reg.alive() == []


def test_a_silent_worker_whose_batch_is_still_locked_does_not_hold_up_the_other_dead_ones(
    registry: tuple[Env, WorkerRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker stopped (SIGSTOP, a long pause) in a row-mode batch looks dead but holds its rows'
    locks: requeueing its hold waits for them and fails (a lock wait timeout). Found by the chaos
    soak: that failure ended the whole look, every heartbeat, so no other dead worker's rows came
    back while it stayed stopped. Each worker is handled on its own, as a corrupt hold record is."""
    env, reg = registry
    entries = env.store.claim_due(20)
    stalled_batch, dead_batch = entries[:10], entries[10:]
    for name, batch in (("a-stalled", stalled_batch), ("b-dead", dead_batch)):  # asked in name order
        reg.register(name, [env.source.name])
        env.queue.push(env.source.name, batch)
        assert env.queue.pop_held(name, [env.source.name], 10, 1.0) is not None
        silence(env, reg, name, 16)
    stalled = env.other_store()  # the stopped worker's session
    reaper = _reaper(env, reg)
    with stalled.started(stalled_batch) as batch, caplog.at_level(logging.WARNING, "duecast.redelivery"):
        assert len(batch.rows) == 10  # locked until the block ends, as by a worker stopped mid-batch
        assert reaper.requeue("held") == 10
        states = env.states()
        assert {states[e.id] for e in dead_batch} == {(0, 1)}
        assert {states[e.id] for e in stalled_batch} == {(1, 1)}
        assert [r.getMessage() for r in caplog.records if "a-stalled" in r.getMessage()]
        assert env.queue.held_by("a-stalled") is not None  # kept for the next look
    assert reaper.requeue("held") == 10  # the lock is gone: its rows go back too
    assert {env.states()[e.id] for e in stalled_batch} == {(0, 1)}
    assert reg.alive() == []
    assert reg.dead() == []
