"""A flood of stale and oversized entries in one ready list does not starve a worker's other lists
(issue 25.6): pop_held serves the lists in turn, so a due row in another list waits one batch of the
flood, not all of it. Before, lists were popped in name order: the probe saw a due job wait > 90 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from duecast.shared.settings import WorkerSettings
from duecast.worker import main as worker_main
from tests.integration import apps
from tests.integration.conftest import Env
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

STALE = 200_000  # well-formed entries of rows that do not exist: each batch is a start that skips all
HUGE = 30  # entries of 1 MB: refused by length, quarantined


def test_a_flooded_list_costs_the_others_one_batch_per_turn(
    make_env: Callable[..., Env], recorder: apps.Recorder
) -> None:
    flooded = make_env("oneoff", rows=1, name=apps.ONEOFF)
    due = make_env("rescan", rows=5, name=apps.RESCAN)
    worker = WorkerSettings(
        app="tests.integration.apps", sources=[apps.ONEOFF, apps.RESCAN], block_timeout_s=0.1
    )
    settings = due.settings.model_copy(update={"sources": [flooded.source, due.source], "worker": worker})
    stale = [b"%d:1" % (10_000_000 + i) for i in range(STALE)]
    for i in range(0, STALE, 10_000):
        flooded.queue.push_raw(apps.ONEOFF, stale[i : i + 10_000])
    flooded.queue.push_raw(apps.ONEOFF, [b"7" * 1_000_000] * HUGE)
    due.queue.push(apps.RESCAN, due.store.claim_due(1))  # one row, due now, in the other list

    stop = threading.Event()
    thread = threading.Thread(target=worker_main.serve, args=(settings, stop), daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        wait_until(lambda: recorder.executions(apps.RESCAN), "the due row to run", timeout_s=60)
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join(30)
    left = flooded.queue.length(apps.ONEOFF)
    print(f"due row ran after {took:.2f} s with {left:,} of {STALE + HUGE:,} flood entries still queued")
    assert took < 5.0, f"the due row waited {took:.1f} s behind the flood"
    assert left > STALE // 2  # served in turn: the flood was not drained first
