"""Hostile Redis entries through the real worker (issue 4): never executed, counted, never a crash.

Malformed ones (odd shapes, Unicode digits, non-UTF-8, huge, beyond BIGINT) are quarantined with
their reason in a capped list. Well-formed ones that no longer match a row (deleted, finished, stale
or future attempts) are counted as stale_entries and skipped: they are a normal by-product of
requeues, so they are not quarantined. test_backpressure_and_bad_entries.py has the first, basic cases.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast.shared.entries import MAX_ATTEMPT, MAX_ID, BadEntry, decode_entry, encode_entry
from duecast.shared.fanout.queue import QUARANTINE_CAP, QUARANTINE_ITEM_BYTES
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, WorkerSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.range_store import RangeStore
from duecast.worker import main as worker_main
from duecast.worker.worker import Worker
from tests.integration import apps, range_app
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration

IDLE, DISPATCHED = 0, 1
MiB = 1024 * 1024

UNICODE_DIGITS = [
    "\u0661:1",  # Arabic-Indic one
    "1:\u0661",
    "\u0661\u0662:\u0663",
    "\u06f1:1",  # extended Arabic-Indic
    "\u0967:1",  # Devanagari one
    "\uff11:1",  # fullwidth one
    "\u00b2:1",  # superscript two: str.isdigit() says yes
    "\u07c1:1",  # NKo one
    "\U0001d7cf:1",  # mathematical bold one
    "1\ufe0f\u20e3:1",  # keycap one
    "\u2460:1",  # circled one
]
NON_UTF8 = [
    b"\xff",
    b"\x80",
    b"1:1\xff",
    b"\xc0\xb1:1",  # overlong encoding of "1"
    b"\xed\xa0\x80:1",  # a UTF-16 surrogate, in UTF-8
    b"1\x00:1",
    b"\x001:1",
    b"1:1\x00",
    "1:1\u00e9".encode("latin-1"),
]
SHAPES = [
    b'{"id": 1, "attempt": 1}',
    b"[1, 1]",
    b"1;1",
    b"1,1",
    b"1:1,2:1",  # two entries in one
    b"1:1 2:1",
    b"id:1",
    b"1:1:",
    b"1::1",
    b"1 : 1",
    b"0x1:1",
    b"1e0:1",
    b"1.0:1",
    b"+1:+1",
    b"-0:1",
    b"NaN:1",
    b"inf:1",
    b"null",
    b"1/1",
    b"1:1\t",
    b"%d" % 1,
]
HUGE = [
    b"1" * 31,
    b"1:" + b"1" * 29,
    b"9" * MiB,
    b"\xff" * MiB,
    ("\u0661" * 100_000).encode(),
]
BEYOND_RANGE = [
    b"%d:1" % (MAX_ID + 1),
    b"%d:1" % 2**64,
    b"1%s:1" % (b"0" * 30),
    b"1:%d" % (MAX_ATTEMPT + 1),
    b"%d:%d" % (MAX_ID + 1, MAX_ATTEMPT + 1),
]
HOSTILE = [s.encode() for s in UNICODE_DIGITS] + NON_UTF8 + SHAPES + HUGE + BEYOND_RANGE


def reason(raw: bytes) -> str:
    with pytest.raises(BadEntry) as info:
        decode_entry(raw)
    return info.value.reason


def worker_settings(env_settings: Settings, app: str, source: str) -> Settings:
    worker = WorkerSettings(app=app, sources=[source], block_timeout_s=0.1, error_backoff_s=0.05)
    return env_settings.model_copy(update={"worker": worker})


def work(settings: Settings) -> Worker:
    return worker_main.serve(settings, threading.Event(), drain=True)


@pytest.fixture
def rescan(make_env: Callable[..., Env], recorder: apps.Recorder) -> Callable[[int], Env]:
    return lambda rows: make_env("rescan", rows=rows, name=apps.RESCAN)


def rescan_worker(env: Env) -> Settings:
    return worker_settings(env.settings, "tests.integration.apps:handlers", apps.RESCAN)


def test_hostile_entries_are_quarantined_and_never_run_while_valid_ones_are(
    rescan: Callable[[int], Env], recorder: apps.Recorder
) -> None:
    env = rescan(10)
    assert len(env.store.claim_due(10)) == 10
    valid = [encode_entry(i, 1) for i in range(1, 6)]
    pushed = list(HOSTILE)
    for i, entry in enumerate(valid):  # valid entries spread through the hostile ones
        pushed.insert(i * len(HOSTILE) // len(valid), entry)
    env.queue.push_raw(apps.RESCAN, pushed)

    worker = work(rescan_worker(env))

    assert worker.counts["bad"] == len(HOSTILE)
    assert worker.counts["acked"] == 5
    assert worker.counts["popped"] == len(pushed)
    assert sorted(recorder.runs) == [(apps.RESCAN, i, 1) for i in range(1, 6)]
    assert env.states() == {
        **{i: (IDLE, 1) for i in range(1, 6)},
        **{i: (DISPATCHED, 1) for i in range(6, 11)},
    }
    quarantined = env.queue.quarantined(apps.RESCAN)
    expected = [f"{reason(raw)} ".encode() + raw[:QUARANTINE_ITEM_BYTES] for raw in HOSTILE]
    assert sorted(quarantined) == sorted(expected)
    assert max(map(len, quarantined)) <= len(b"attempt_out_of_range ") + QUARANTINE_ITEM_BYTES
    assert env.queue.stats(apps.RESCAN)["bad"] == len(HOSTILE)
    assert env.queue.length(apps.RESCAN) == 0


def test_a_batch_of_nothing_but_bad_entries_runs_no_handler_and_no_sql(
    rescan: Callable[[int], Env], recorder: apps.Recorder, sql: pymysql.cursors.Cursor
) -> None:
    env = rescan(3)
    env.store.claim_due(3)
    before = env.states()
    env.queue.push_raw(apps.RESCAN, HUGE + BEYOND_RANGE)

    worker = work(rescan_worker(env))

    assert (worker.counts["bad"], worker.counts["acked"], worker.counts["stale_entries"]) == (10, 0, 0)
    assert recorder.runs == []
    assert env.states() == before


def test_entries_of_deleted_finished_and_missing_rows_and_stale_or_future_attempts_are_skipped(
    rescan: Callable[[int], Env], recorder: apps.Recorder
) -> None:
    env = rescan(10)
    assert len(env.store.claim_due(10)) == 10  # every row on attempt 1
    env.query("DELETE FROM {t} WHERE {pk} = 3")  # deleted while its entry waits
    env.queue.push_raw(apps.RESCAN, [b"4:1"])
    assert work(rescan_worker(env)).counts["acked"] == 1  # row 4 finished (idle, attempt 1)
    env.backdate_dispatch(where="user_id = 5")
    assert env.store.requeue_expired(60, 10) == 1
    assert len(env.store.claim_due(10)) == 1  # row 5 now on attempt 2
    recorder.reset()

    skipped = [
        b"3:1",  # deleted row
        b"4:1",  # finished row: a copy of an entry already run
        b"5:1",  # stale attempt
        b"6:2",  # future attempt
        b"6:%d" % MAX_ATTEMPT,  # far-future attempt
        b"11:1",  # no such row
        encode_entry(MAX_ID, 1),  # the largest id an entry may carry: no such row either
        encode_entry(MAX_ID, MAX_ATTEMPT),
    ]
    runnable = [b"5:2", b"6:1", b"7:1"]
    env.queue.push_raw(apps.RESCAN, [*skipped[:4], *runnable, *skipped[4:]])

    worker = work(rescan_worker(env))

    assert worker.counts["stale_entries"] == len(skipped)
    assert (worker.counts["acked"], worker.counts["bad"], worker.counts["failed"]) == (3, 0, 0)
    assert sorted(recorder.runs) == [(apps.RESCAN, 5, 2), (apps.RESCAN, 6, 1), (apps.RESCAN, 7, 1)]
    assert env.queue.quarantined(apps.RESCAN) == []  # well-formed: skipped, not quarantined
    states = env.states()
    assert 3 not in states
    assert states[4] == (IDLE, 1)
    assert (states[5], states[6], states[8]) == ((IDLE, 2), (IDLE, 1), (DISPATCHED, 1))
    assert env.queue.stats(apps.RESCAN)["stale_entries"] == len(skipped)


def test_entries_of_finished_one_off_rows_are_skipped(
    make_env: Callable[..., Env], recorder: apps.Recorder
) -> None:
    env = make_env("oneoff", rows=3, name=apps.ONEOFF)
    settings = worker_settings(env.settings, "tests.integration.apps:handlers", apps.ONEOFF)
    entries = env.store.claim_due(3)
    env.queue.push(apps.ONEOFF, entries)
    assert work(settings).counts["acked"] == 3
    assert env.count() == 0  # done one-off rows are deleted

    env.queue.push(apps.ONEOFF, entries)  # every entry again
    worker = work(settings)

    assert (worker.counts["stale_entries"], worker.counts["acked"]) == (3, 0)
    assert recorder.executions(apps.ONEOFF) == {1: 1, 2: 1, 3: 1}


def test_huge_bad_entries_keep_the_quarantine_capped_in_count_and_size(rescan: Callable[[int], Env]) -> None:
    env = rescan(0)
    n = QUARANTINE_CAP + 100
    env.queue.push_raw(apps.RESCAN, [b"%06d" % i + b"x" * 4096 for i in range(n)])

    worker = work(rescan_worker(env))

    assert worker.counts["bad"] == n
    quarantined = env.queue.quarantined(apps.RESCAN)
    assert len(quarantined) == QUARANTINE_CAP
    assert all(len(q) == len(b"too_long ") + QUARANTINE_ITEM_BYTES for q in quarantined)
    assert quarantined[0].startswith(b"too_long %06d" % (n - 1))  # the newest first


# ---------------------------------------------------------------- range mode


@pytest.fixture
def ranged(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    src = range_app.users_source(sql, 300, prefix="bad_ranges")
    table = src.table
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        sources=[src],
        jobs={"enabled": False},
    )
    migrate.apply(settings)
    range_app.PLAN.reset()
    yield worker_settings(settings, "tests.integration.range_app", range_app.SOURCE)
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{ranges_table(src)}`")


def test_range_mode_skips_unknown_spans_and_quarantines_hostile_entries(
    ranged: Settings, sql: pymysql.cursors.Cursor
) -> None:
    (store,) = build_stores(ranged, ranged.sources)
    assert isinstance(store, RangeStore)
    queue = build_queue(ranged)
    try:
        assert store.discover(full=True) == 4  # ids 1..300
        claimed = store.claim_due(10)
        assert len(claimed) == 4
        queue.push_raw(
            range_app.SOURCE,
            [
                b"99:1",  # no such span
                encode_entry(claimed[0].id, 2),  # future attempt of a real span
                encode_entry(MAX_ID, 1),
                *HUGE[:2],
                *BEYOND_RANGE[:2],
                UNICODE_DIGITS[0].encode(),
            ],
        )
        worker = work(ranged)
    finally:
        queue.client.close()
        store.db.close()

    assert (worker.counts["stale_entries"], worker.counts["bad"], worker.counts["acked"]) == (3, 5, 0)
    assert range_app.PLAN.runs == {}  # no business row was handled
    sql.execute(f"SELECT COUNT(*) FROM `{ranges_table(ranged.sources[0])}` WHERE dc_state = 1")
    assert sql.fetchone() == (4,)  # the claimed spans are untouched, still the sweeper's


# ---------------------------------------------------------------- wrong Redis types


def test_a_ready_key_of_the_wrong_type_is_moved_aside_and_the_worker_carries_on(
    rescan: Callable[[int], Env], recorder: apps.Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone SETs the ready list's key. duecast owns it: the worker's pop moves it aside (logged,
    counted) and carries on in the same tick, instead of failing every tick until someone deletes
    it (issue 16.3; tests/integration/recovery/test_wrong_type_keys.py covers every key)."""
    env = rescan(1)
    entries = env.store.claim_due(1)
    ready = env.queue.keys.ready(apps.RESCAN)
    env.queue.client.set(ready, b"not a list")
    with caplog.at_level(logging.WARNING):
        worker_main.serve(rescan_worker(env), threading.Event(), drain=True)
        assert env.queue.client.type(ready) == b"none"
        env.queue.push(apps.RESCAN, entries)
        worker_main.serve(rescan_worker(env), threading.Event(), drain=True)
    assert "tick failed" not in caplog.text
    assert [r.levelno for r in caplog.records if getattr(r, "event", None) == "queue.wrong_type_key"] == [
        logging.WARNING
    ]
    assert recorder.executions(apps.RESCAN) == {1: 1}
