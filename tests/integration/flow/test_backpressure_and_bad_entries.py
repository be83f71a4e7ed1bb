"""Dispatcher and worker on real MariaDB + Redis under backpressure, and with bad or duplicate entries."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from duecast.dispatcher import main as dispatcher_main
from duecast.shared.entries import encode_entry
from duecast.shared.fanout.queue import QUARANTINE_CAP, QUARANTINE_ITEM_BYTES
from duecast.worker import main as worker_main
from tests.integration import apps
from tests.integration.conftest import Env
from tests.integration.flow.roles_helpers import DISPATCHED, IDLE, dispatch, handled_once, role_settings, work
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- backpressure


def test_the_dispatcher_stops_claiming_at_the_high_water_mark(rescan: Callable[..., Env]) -> None:
    env = rescan(1000, high_water=100, claim_batch=50)
    settings = role_settings(env)

    dispatch(settings)

    assert env.queue.length(apps.RESCAN) == 100
    assert env.count("dc_state = 1") == 100
    dispatch(settings)  # still full: claims nothing
    assert env.count("dc_state = 1") == 100

    popped = env.queue.pop([apps.RESCAN], 30, 1.0)
    assert popped is not None
    assert len(popped[1]) == 30
    dispatch(settings)

    assert env.queue.length(apps.RESCAN) == 100
    assert env.count("dc_state = 1") == 130
    assert env.queue.stats(apps.RESCAN) == {"claimed": 130}


def test_under_backpressure_every_row_still_goes_through_once(
    rescan: Callable[..., Env], recorder: apps.Recorder
) -> None:
    n, high_water = 1000, 100
    # A checked row is due again at its phase's slot, anywhere in the next period (the even pace):
    # with a period of an hour, 1,000 rows put one due again every 3.6 s, and this test failed 3
    # times in 50 that way (9 rows ran twice). The longest period: one every 8.8 hours.
    env = rescan(n, high_water=high_water, claim_batch=50, period_s=366 * 86400)
    env.sql.execute(f"UPDATE `{env.source.table}` SET updated_time = '2000-01-01'")  # due at once
    settings = role_settings(env, worker={"pop_batch": 20}, run_sweeper=False)
    stop = threading.Event()
    lengths: list[int] = []
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)

        return run

    def sample() -> None:
        while not stop.is_set():
            lengths.append(env.queue.length(apps.RESCAN))
            stop.wait(0.005)

    threads = [
        threading.Thread(target=guarded(lambda: dispatcher_main.serve(settings, stop))),
        threading.Thread(target=guarded(lambda: worker_main.serve(settings, stop))),
        threading.Thread(target=guarded(sample)),
    ]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: env.count("dc_state = 0 AND dc_attempt = 1") == n, "every row to be acked", 30)
    except AssertionError as exc:  # say where the rows are
        env.sql.execute(
            f"SELECT dc_state, dc_attempt, COUNT(*) FROM `{env.source.table}` GROUP BY 1, 2 ORDER BY 1, 2"
        )
        where = env.sql.fetchall()
        raise AssertionError(
            f"{exc}; (state, attempt, rows): {where}; ready list: "
            f"{env.queue.length(apps.RESCAN)}; stats: {env.queue.stats(apps.RESCAN)}; errors: {errors!r}"
        ) from exc
    finally:
        stop.set()
        for t in threads:
            t.join(10)

    assert errors == []
    assert max(lengths) <= high_water
    assert max(lengths) > 0
    handled_once(recorder, apps.RESCAN, range(1, n + 1))
    assert env.queue.stats(apps.RESCAN)["acked"] == n


# ---------------------------------------------------------------- bad and duplicate entries


def test_bad_entries_are_counted_quarantined_and_never_run(
    rescan: Callable[..., Env], recorder: apps.Recorder
) -> None:
    env = rescan(10)
    settings = role_settings(env)
    store = env.store
    assert len(store.claim_due(10)) == 10
    env.backdate_dispatch(where="user_id = 9")
    assert store.requeue_expired(60, 10) == 1
    assert len(store.claim_due(10)) == 1  # row 9 is now on attempt 2
    huge = b"7" * (10 * 1024 * 1024)
    malformed = {
        b"": "malformed",
        b"abc": "malformed",
        b"-5:1": "malformed",
        b"1.5:1": "malformed",
        b"\xff\xfe": "malformed",
        b"0:1": "malformed",
        b"1:0": "malformed",
        b"01:1": "malformed",
        b"1 :1": "malformed",
        b"9999999999999999999:1": "id_out_of_range",
        b"1:9999999999": "attempt_out_of_range",
        huge: "too_long",
    }
    stale = [b"9:1", b"10:2", b"99999999:1"]  # old attempt, future attempt, no such row
    valid = [encode_entry(i, 1) for i in range(1, 6)]
    # Valid and stale entries interleaved with the bad ones, all in one pop.
    pushed: list[bytes] = []
    for bad, good in zip(malformed, [*valid, *stale, *[None] * len(malformed)], strict=False):
        pushed += [bad] if good is None else [bad, good]
    assert len(pushed) == len(malformed) + len(valid) + len(stale)
    env.queue.push_raw(apps.RESCAN, pushed)

    worker = work(settings)

    assert worker.counts["popped"] == len(pushed)
    assert worker.counts["bad"] == len(malformed)
    assert worker.counts["stale_entries"] == len(stale)
    assert worker.counts["acked"] == 5
    assert worker.counts["failed"] == 0
    assert sorted(recorder.runs) == [(apps.RESCAN, i, 1) for i in range(1, 6)]
    assert env.states() == {
        **{i: (IDLE, 1) for i in range(1, 6)},
        **{i: (DISPATCHED, 1) for i in (6, 7, 8, 10)},
        9: (DISPATCHED, 2),
    }
    quarantined = env.queue.quarantined(apps.RESCAN)
    assert sorted(quarantined) == sorted(
        f"{why} ".encode() + raw[:QUARANTINE_ITEM_BYTES] for raw, why in malformed.items()
    )
    assert max(len(q) for q in quarantined) == len(b"too_long ") + QUARANTINE_ITEM_BYTES
    assert env.queue.stats(apps.RESCAN) == {
        "popped": len(pushed),
        "bad": len(malformed),
        "stale_entries": len(stale),
        "started": 5,
        "acked": 5,
    }

    # The worker goes on with the next entries as usual.
    env.queue.push_raw(apps.RESCAN, [encode_entry(i, 1) for i in (6, 7, 8)])
    assert work(settings).counts["acked"] == 3
    assert env.count("dc_state = 0") == 8


def test_the_quarantine_keeps_only_the_newest_entries(rescan: Callable[..., Env]) -> None:
    env = rescan()
    env.queue.push_raw(apps.RESCAN, [b"bad-%d" % i for i in range(QUARANTINE_CAP + 100)])

    worker = work(role_settings(env))

    assert worker.counts["bad"] == QUARANTINE_CAP + 100
    quarantined = env.queue.quarantined(apps.RESCAN)
    assert len(quarantined) == QUARANTINE_CAP
    assert quarantined[0] == b"malformed bad-%d" % (QUARANTINE_CAP + 99)
    assert quarantined[-1] == b"malformed bad-100"


@pytest.mark.parametrize("pop_batch", [2000, 1], ids=["one-pop", "three-pops"])
def test_an_entry_pushed_three_times_runs_once(
    rescan: Callable[..., Env], recorder: apps.Recorder, pop_batch: int
) -> None:
    env = rescan(2)
    settings = role_settings(env, worker={"pop_batch": pop_batch})
    dispatch(settings)  # pushes 1:1 and 2:1
    env.queue.push_raw(apps.RESCAN, [b"1:1", b"1:1"])

    worker = work(settings)

    assert recorder.executions(apps.RESCAN) == Counter({1: 1, 2: 1})
    assert (worker.counts["acked"], worker.counts["stale_entries"]) == (2, 2)
    assert env.states() == {1: (IDLE, 1), 2: (IDLE, 1)}
