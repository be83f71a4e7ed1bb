"""Handlers for bench/io_checks/io_rescan.py: the re-scan's check as a 20 ms wait on I/O, four ways.

Each registry serves user_block_status; the worker picks one (`--app io_rescan_app:async_slow`).
In the slow ones, the user id decides: id % 100 == 7 takes 2 s, id % 1000 == 3 hangs until the
source's timeout_s. Every check that ends stamps time.time() at its user's slot of the stamp file
(DUECAST_BENCH_STAMPS: one double per user id, shared by every worker process), and is counted in
its tenth of a wall-clock second, written to $DUECAST_BENCH_PACE_DIR at the worker's stop (the
pace the called service sees, as bench/pace_app.py counts it for bench/rescan.py).
"""

from __future__ import annotations

import asyncio
import json
import mmap
import os
import threading
import time
from collections import Counter
from pathlib import Path

from duecast import Registry, Row

SOURCE = "user_block_status"
STAMPS_ENV = "DUECAST_BENCH_STAMPS"
PACE_ENV = "DUECAST_BENCH_PACE_DIR"
WAIT_S = 0.02  # the call to another service
SLOW_S = 2.0  # ...when it is slow
THREAD_HANG_S = 60.0  # a hung blocking call: Python cannot cancel a thread, so it ends by itself


def is_slow(user_id: int) -> bool:
    return user_id % 100 == 7


def hangs(user_id: int) -> bool:
    return user_id % 1000 == 3


class Stamps:
    """The stamp file, mapped at the first check (not at import) and kept; a slot is 8 aligned bytes,
    so processes and threads writing different users never tear each other's stamps."""

    slots: memoryview | None = None
    per_tenth: Counter[int] = Counter()  # checks ended per tenth of a wall-clock second: int(t * 10)
    lock = threading.Lock()  # the thread handlers' counts (a Counter's += is not atomic across threads)

    @classmethod
    def mark(cls, user_id: int) -> None:
        if cls.slots is None:
            with open(os.environ[STAMPS_ENV], "r+b") as f:
                cls.slots = memoryview(mmap.mmap(f.fileno(), 0)).cast("d")
        now = cls.slots[user_id] = time.time()
        cls.per_tenth[int(now * 10)] += 1  # on the event loop: one thread

    @classmethod
    def mark_from_thread(cls, user_id: int) -> None:
        with cls.lock:
            cls.mark(user_id)

    @classmethod
    def write_counts(cls) -> None:
        if folder := os.environ.get(PACE_ENV):
            counts = {str(k): v for k, v in cls.per_tenth.items()}
            (Path(folder) / f"{os.getpid()}.json").write_text(json.dumps({"tenths": counts}))


async_fast = Registry()
async_slow = Registry()
threads = Registry()
threads_slow = Registry()
for _registry in (async_fast, async_slow, threads, threads_slow):
    _registry.on_stop(Stamps.write_counts)


@async_fast.row(SOURCE, columns=["status"])
async def check(row: Row) -> None:
    await asyncio.sleep(WAIT_S)
    Stamps.mark(row["user_id"])


@async_slow.row(SOURCE, columns=["status"])
async def check_slow(row: Row) -> None:
    user_id = row["user_id"]
    if hangs(user_id):
        try:
            await asyncio.Event().wait()  # never set: only the timeout ends it
        finally:
            Stamps.mark(user_id)  # when it was cancelled: the attempt's end
    await asyncio.sleep(SLOW_S if is_slow(user_id) else WAIT_S)
    Stamps.mark(user_id)


@threads.row(SOURCE, columns=["status"])
def check_blocking(row: Row) -> None:
    time.sleep(WAIT_S)
    Stamps.mark_from_thread(row["user_id"])


@threads_slow.row(SOURCE, columns=["status"])
def check_blocking_slow(row: Row) -> None:
    user_id = row["user_id"]
    time.sleep(THREAD_HANG_S if hangs(user_id) else SLOW_S if is_slow(user_id) else WAIT_S)
    Stamps.mark_from_thread(user_id)
