"""The worker registry and redelivery's "held" cause on real MariaDB + Redis: workers register and
beat; one whose heartbeat is older than dead_after_s (back-dated in SQL) is dead, and the batch it
had popped goes back to pending at once, fenced, while a live worker's batch is left alone."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.entries import encode_entry
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.db import Database, connect
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


def test_a_dead_workers_rows_still_locked_wait_for_the_next_look_and_the_others_go_back_now(
    registry: tuple[Env, WorkerRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 12.5: a stopped worker (SIGSTOP) keeps its batch's rows locked; requeuing them meets a
    lock wait timeout. That is one WARNING line, its hold and registration are kept for the next
    look, and every other dead worker's rows go back now (before, the whole look failed with a
    traceback, every heartbeat, for as long as the worker was stopped)."""
    env, reg = registry
    quick = env.settings.mysql.model_copy(update={"lock_wait_s": 1})
    (store,) = build_stores(env.settings.model_copy(update={"mysql": quick}), [env.source])
    entries = store.claim_due(20)
    stopped_batch, dead_batch = entries[:10], entries[10:]
    for name, batch in (("stopped-worker", stopped_batch), ("dead-worker", dead_batch)):
        reg.register(name, [env.source.name])
        env.queue.push(env.source.name, batch)
        assert env.queue.pop_held(name, [env.source.name], 10, 1.0) is not None
        silence(env, reg, name, 60)
    reaper = Redelivery([store], env.queue, {"held": reg.settings.heartbeat_s}, 100, registry=reg)
    holder = connect(env.settings.mysql)  # the stopped worker's open transaction
    try:
        with holder.cursor() as cur:
            # By PRIMARY, as a worker locks its batch: those rows only.
            ids = ",".join(str(e.id) for e in stopped_batch)
            where = f"`{env.id_column}` IN ({ids})"
            cur.execute(f"SELECT 1 FROM `{env.table}` FORCE INDEX (PRIMARY) WHERE {where} FOR UPDATE")
        with caplog.at_level(logging.WARNING, logger="duecast.redelivery"):
            assert reaper.requeue("held") == 10
    finally:
        holder.rollback()
        holder.close()

    states = env.states()
    assert {states[e.id] for e in dead_batch} == {(0, 1)}
    assert {states[e.id] for e in stopped_batch} == {(1, 1)}
    assert env.queue.held_by("dead-worker") is None
    assert env.queue.held_by("stopped-worker") is not None  # kept for the next look
    assert reg.dead() == ["stopped-worker"]
    (kept,) = [r for r in caplog.records if getattr(r, "event", None) == "redelivery.held_retry"]
    assert kept.levelno == logging.WARNING
    assert kept.exc_info is None
    assert "worker stopped-worker" in kept.getMessage()
    assert "1205" in kept.getMessage()

    assert reaper.requeue("held") == 10  # the lock is gone: the next look takes them
    states = env.states()
    assert {states[e.id] for e in stopped_batch} == {(0, 1)}
    assert reg.dead() == []
