"""The Prometheus metrics as the real roles produce them, on real MariaDB and Redis.

Counters are process-wide and other tests use the same source names, so each test compares a
counter's value after the work with its value before.
"""

from __future__ import annotations

import threading
import urllib.error
import uuid
from collections.abc import Callable, Iterator

import pymysql
import pytest
from prometheus_client import REGISTRY

from duecast.dispatcher import main as dispatcher_main
from duecast.dispatcher.gauges import SystemGauges
from duecast.dispatcher.redelivery import sweeper
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.settings import (
    DispatcherSettings,
    HealthSettings,
    MySQLSettings,
    RedisSettings,
    Settings,
    WorkerSettings,
)
from duecast.shared.storage.admin import migrate
from duecast.worker import main as worker_main
from tests.faults.private_redis import free_ports
from tests.integration import apps, jobs_app
from tests.integration.conftest import Env
from tests.integration.ops.test_health import get, running
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def metric_line(text: str, name: str, source: str) -> float | None:
    prefix = f'{name}{{source="{source}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


def metrics_text(port: int) -> str:
    """This port's /metrics, or "" while nothing listens there yet."""
    try:
        status, _, body = get(port, "/metrics")
    except urllib.error.URLError:
        return ""
    return body.decode() if status == 200 else ""


def roles(env: Env, **health: object) -> Settings:
    return env.settings.model_copy(
        update={
            "worker": WorkerSettings(
                app="tests.integration.apps:handlers", sources=[env.source.name], block_timeout_s=0.1
            ),
            "dispatcher": DispatcherSettings(poll_interval_s=0.05, run_sweeper=False),
            "health": HealthSettings.model_validate({"host": "127.0.0.1", **health}),
        }
    )


def test_a_dispatch_and_a_drain_count_every_row_and_time_every_batch(
    make_env: Callable[..., Env], recorder: apps.Recorder
) -> None:
    env = make_env("rescan", rows=120, name=apps.RESCAN, claim_batch=50)
    settings = roles(env)
    src = env.source.name
    names = ("claimed", "pushed", "popped", "started", "acked", "failed")
    before = {n: sample(f"duecast_{n}_total", source=src) for n in names}
    batches = {
        r: sample("duecast_batch_duration_seconds_count", role=r, source=src)
        for r in ("dispatcher", "worker")
    }
    handled = sample("duecast_handler_duration_seconds_count", source=src)
    recorder.fail_once = {7}

    dispatcher_main.serve(settings, threading.Event(), drain=True)
    worker_main.serve(settings, threading.Event(), drain=True)

    delta = {n: sample(f"duecast_{n}_total", source=src) - before[n] for n in names}
    assert delta == {"claimed": 120, "pushed": 120, "popped": 120, "started": 120, "acked": 119, "failed": 1}
    # Three claims of at most 50 rows; each worker batch is timed, and each row's handler call.
    assert (
        sample("duecast_batch_duration_seconds_count", role="dispatcher", source=src) - batches["dispatcher"]
        == 3
    )
    assert sample("duecast_batch_duration_seconds_count", role="worker", source=src) > batches["worker"]
    assert sample("duecast_handler_duration_seconds_count", source=src) - handled == 120
    # The Redis counters, summed over processes, got the same counts.
    assert env.queue.stats(src) == {"claimed": 120, "popped": 120, "started": 120, "acked": 119, "failed": 1}


def test_the_sweeper_counts_redeliveries_and_the_worker_bad_and_stale_entries(
    make_env: Callable[..., Env], recorder: apps.Recorder
) -> None:
    env = make_env("rescan", rows=3, name=apps.RESCAN)
    settings = roles(env)
    src = env.source.name
    names = ("redeliveries", "bad_entries", "stale_entries")
    before = {n: sample(f"duecast_{n}_total", source=src) for n in names}

    entries = env.store.claim_due(3)  # claimed, never pushed: as if the dispatcher died
    env.backdate_dispatch()
    sweeper(settings, build_stores(settings, [env.source]), build_queue(settings)).drain()
    env.queue.push_raw(src, [b"not-an-entry", f"{entries[0].id}:{entries[0].attempt}".encode()])
    worker_main.serve(settings, threading.Event(), drain=True)

    delta = {n: sample(f"duecast_{n}_total", source=src) - before[n] for n in names}
    assert delta == {"redeliveries": 3, "bad_entries": 1, "stale_entries": 1}


def test_only_the_dispatcher_sets_the_system_gauges(
    make_env: Callable[..., Env], sql: pymysql.cursors.Cursor
) -> None:
    env = make_env("rescan", rows=100, name=apps.RESCAN)
    src = env.source.name
    sql.execute(f"UPDATE `{env.table}` SET updated_time = NOW(6) - INTERVAL 2 SECOND WHERE user_id <= 60")
    worker_port, dispatcher_port = free_ports(2)
    SystemGauges.clear()  # whatever an earlier test's dispatcher left in this process

    # A worker serving the source exports no gauge for it.
    stop = threading.Event()
    worker_settings = roles(env, port=worker_port, gauges_interval_s=0.1)
    with running(lambda: worker_main.serve(worker_settings, stop), stop) as check:
        wait_until(lambda: check() or metrics_text(worker_port), "the worker's /metrics")
        text = metrics_text(worker_port)
    assert "duecast_popped_total" in text
    assert metric_line(text, "duecast_due_backlog", src) is None

    # The dispatcher claims the 40 due rows (no worker runs now) and reports the whole system.
    stop = threading.Event()
    settings = roles(env, port=dispatcher_port, gauges_interval_s=0.1)
    names = ("due_backlog", "ready_list_length", "in_flight", "checked_within_period_ratio")
    want = {"due_backlog": 0, "ready_list_length": 40, "in_flight": 40, "checked_within_period_ratio": 0.6}
    with running(lambda: dispatcher_main.serve(settings, stop), stop) as check:

        def gauges() -> dict[str, float | None]:
            check()
            text = metrics_text(dispatcher_port)
            return {n: metric_line(text, f"duecast_{n}", src) for n in names}

        wait_until(lambda: gauges() == want, f"the dispatcher's gauges to read {want}", timeout_s=20)
        text = metrics_text(dispatcher_port)
    # The 40 claimed rows were last checked an hour ago (and became due 10 s later).
    assert 3590 < (metric_line(text, "duecast_worst_staleness_seconds", src) or 0) < 3700
    assert 3580 < (metric_line(text, "duecast_oldest_due_age_seconds", src) or 0) < 3690


def test_a_failing_source_keeps_its_last_gauges_and_a_standby_drops_them(
    make_env: Callable[..., Env],
) -> None:
    good, bad = make_env("rescan", rows=5, name=f"g_{uuid.uuid4().hex[:8]}"), make_env("rescan", rows=5)
    stores = build_stores(good.settings, [good.source]) + build_stores(bad.settings, [bad.source])
    gauges = SystemGauges(stores, good.queue)
    gauges.refresh()
    assert sample("duecast_due_backlog", source=good.source.name) == 5
    assert sample("duecast_due_backlog", source=bad.source.name) == 5

    bad.sql.execute(f"DROP TABLE `{bad.table}`")
    good.sql.execute(f"UPDATE `{good.table}` SET updated_time = NOW(6) WHERE user_id <= 2")
    gauges.refresh()
    assert sample("duecast_due_backlog", source=good.source.name) == 3
    assert sample("duecast_due_backlog", source=bad.source.name) == 5
    gauges.duty(leading=lambda: True)()
    assert sample("duecast_due_backlog", source=good.source.name) == 3
    gauges.duty(leading=lambda: False)()  # a standby dispatcher exports none
    assert REGISTRY.get_sample_value("duecast_due_backlog", {"source": good.source.name}) is None


@pytest.fixture
def jobs_settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s", "retry_base_s": 30},  # type: ignore[arg-type]
        worker={"app": "tests.integration.jobs_app", "block_timeout_s": 0.1},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    jobs_app.RUNS.clear()
    yield settings
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def test_jobs_count_retries_and_dead_letters(jobs_settings: Settings) -> None:
    src = "jobs.default"
    before = {n: sample(f"duecast_{n}_total", source=src) for n in ("retried", "dead", "acked")}
    enqueuer = Enqueuer(jobs_settings, connect_redis(jobs_settings.redis), jobs_app.handlers.task_names)
    enqueuer.enqueue("fail_always", "again", max_attempts=2)  # first failure: retried
    enqueuer.enqueue("fail_always", "last", max_attempts=1)  # dead at once
    enqueuer.enqueue("give_up", "no")  # discarded by its task: dead
    enqueuer.enqueue("record", "ok")

    dispatcher_main.serve(jobs_settings, threading.Event(), drain=True)
    worker_main.serve(jobs_settings, threading.Event(), drain=True)

    delta = {n: sample(f"duecast_{n}_total", source=src) - v for n, v in before.items()}
    assert delta == {"retried": 1, "dead": 2, "acked": 2}  # give_up's discard is acked, and dead
