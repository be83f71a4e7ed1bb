"""Redelivery's registry clean-up never stalls its tick (issue 24, item 1): a dead worker whose
registry row another session holds (a stopped worker's open transaction) is left for the next look,
without waiting for the lock, and the look goes on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pytest

from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.schema import workers_table_ddl
from duecast.shared.storage.worker_registry import WorkerRegistry
from tests.integration.conftest import Env
from tests.integration.ops.test_workers_registry import silence

pytestmark = pytest.mark.integration


@pytest.fixture
def registry(make_env: Callable[..., Env]) -> Iterator[tuple[Env, WorkerRegistry]]:
    env = make_env("rescan", rows=3)
    settings = WorkerSettings(registry_table=f"wreg_{env.table[-8:]}", heartbeat_s=1, dead_after_s=15)
    env.sql.execute(workers_table_ddl(settings.registry_table))
    reg = WorkerRegistry(Database(env.settings.mysql), settings)
    yield env, reg
    reg.db.close()
    env.sql.execute(f"DROP TABLE IF EXISTS `{settings.registry_table}`")


def test_a_dead_workers_locked_registry_row_is_left_for_the_next_look_without_waiting(
    registry: tuple[Env, WorkerRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    env, reg = registry
    for name in ("stopped-worker", "dead-worker"):
        reg.register(name, [env.source.name])
        silence(env, reg, name, 60)
    reaper = Redelivery([env.store], env.queue, {"held": reg.settings.heartbeat_s}, 100, registry=reg)
    holder = connect(env.settings.mysql)  # the stopped worker's open transaction holds its own row
    try:
        with holder.cursor() as cur:
            cur.execute(
                f"SELECT name FROM `{reg.settings.registry_table}` WHERE name = 'stopped-worker' FOR UPDATE"
            )
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="duecast.redelivery"):
            assert reaper.requeue("held") == 0  # the look ends, not a lock wait timeout
        took_s = time.monotonic() - began
        assert reg.dead() == ["stopped-worker"]  # the other one is forgotten
    finally:
        holder.rollback()
        holder.close()
    assert took_s < env.settings.mysql.lock_wait_s  # it never waited for the lock
    (kept,) = [r for r in caplog.records if getattr(r, "event", None) == "redelivery.forget_retry"]
    assert "locked by another session" in kept.getMessage()
    assert reaper.requeue("held") == 0  # the next look, the lock gone: forgotten
    assert reg.dead() == []
