"""Benchmark: a range-mode worker's Python per check, in one process with no servers: the real Worker
(its tick, starts, runners, acks) over a RangeStore whose database and lease keeper are fakes that
answer at once. Each span's rows come as the packed read returns them (bench/job_path.py's pattern).

Two checks: the demo's plain batch check (examples/block_check.py, on one handler thread) and an
`async def` check awaiting 20 ms (bench/io_checks' re-scan check, on the event loop); and
`--check async-slow`, the same with bench/io_checks' slow and hung users (1% take 2 s, 0.1% hang
until the source's timeout_s = 5), which hold their batches open as in the 1M re-scan. Its figure for
an A/B is instructions, not time: each check run under callgrind over the same users once and three
times, the difference of the two totals over the checks between them is the per-check cost, start-up
and building the fakes cancelled, whatever else the machine does (a few minutes):

    scripts/dev shell python bench/range_path.py --instructions         # both checks, under valgrind
    scripts/dev shell python bench/range_path.py --check batch --rounds 5   # CPU time, one check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from duecast import Registry, Row
from duecast.examples.block_check import check_users
from duecast.shared.entries import Entry, encode_entry
from duecast.shared.policy import lease_timing
from duecast.shared.process import collector
from duecast.shared.settings import MySQLSettings, SourceSettings, WorkerSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.keeper import Hold
from duecast.shared.storage.range_store import RangeStore
from duecast.worker.worker import Worker

SOURCE = "user_block_status"
SPAN = 1000  # range_size, the demo's
POP = 2000  # rows per pop (the demo's pop_batch = claim_batch)
_FENCE = re.compile(r"IN \(([\d,]+)\) AND `dc_attempt` = (\d+)")  # a fence's groups: ids, attempt
_LOS = re.compile(r">= (\d+) AND")  # a span's first id in the rows' read


class FakeCursor:
    """Answers the statements a range-mode worker runs, from the spans the fake table holds."""

    def __init__(self, table: FakeTable) -> None:
        self.table = table
        self.description: list[tuple[str, ...]] | None = None
        self._rows: list[Any] = []
        self.rowcount = 0

    def execute(self, stmt: str, args: Any = None) -> int:
        self._rows, self.description = [], None
        if stmt.startswith("SELECT COUNT(*), JSON_ARRAYAGG"):
            count, packed = self.table.packed(stmt)
            self._rows = [(count, packed)]
        elif "FOR UPDATE" in stmt:
            pairs = [(int(i), int(a)) for ids, a in _FENCE.findall(stmt) for i in ids.split(",")]
            if stmt.startswith("SELECT `range_id`, `dc_attempt`"):  # the start's lock (id: lo DIV size + 1)
                self.description = [("range_id",), ("dc_attempt",), ("lo",), ("hi",)]
                self._rows = [(i, a, (i - 1) * SPAN, i * SPAN) for i, a in pairs]
            else:  # lock_running / lock_attempt: every span is still ours
                self._rows = [(i,) for i, _ in pairs]
        elif stmt.startswith("SELECT"):
            self._rows = [(1,)]  # the start's NOW(6)
        self.rowcount = len(self._rows) or 1
        return self.rowcount

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows


class FakeTable:
    """The business rows: each span's packed read made once (status 1 for every user)."""

    def __init__(self, spans: int) -> None:
        self._packed = {
            lo: json.dumps([[u, 1] for u in range(lo * SPAN, lo * SPAN + SPAN)]) for lo in range(spans)
        }

    def packed(self, stmt: str) -> tuple[int, str]:
        los = [int(lo) // SPAN for lo in _LOS.findall(stmt)]
        parts = [self._packed[lo][1:-1] for lo in los]
        return len(los) * SPAN, "[" + ",".join(parts) + "]"


class FakeDatabase(Database):
    def __init__(self, table: FakeTable) -> None:
        super().__init__(MySQLSettings())  # never connects: every unit runs on a FakeCursor
        self.table = table

    @contextmanager
    def transaction(self, *, check: bool = False) -> Iterator[Any]:
        yield FakeCursor(self.table)

    def close(self) -> None:
        pass


class FakeLeases:
    """The lease keeper without its threads: every start in time, a real Hold per batch (asked
    before each call as a real one is)."""

    def __init__(self, lease_s: float) -> None:
        self._timing = lease_timing(lease_s)
        self._lock = threading.Condition()

    def in_time(self, since: float) -> bool:
        return True

    @contextmanager
    def holding(self, entries: Sequence[Entry], since: float) -> Iterator[Hold]:
        # Confirmed far ahead: no renewal ever comes, and a slow run (callgrind) must not run out.
        yield Hold(0, entries, since + 1e9, self._timing, self._lock)

    def close(self) -> None:
        pass


class FakeQueue:
    """The ready list: every span once per round, popped in batches; stats dropped."""

    def __init__(self) -> None:
        self.ready: deque[bytes] = deque()

    def pop(self, sources: Sequence[str], count: int, timeout_s: float) -> tuple[str, list[bytes]] | None:
        if not self.ready:
            return None
        return SOURCE, [self.ready.popleft() for _ in range(min(count, len(self.ready)))]

    def add_stats(self, source: str, counts: Any) -> None:
        pass


def registry(check: str) -> Registry:
    handlers = Registry()
    if check == "batch":
        handlers.batch(SOURCE, columns=["status"])(check_users)
    elif check == "async":

        async def awaiting(row: Row) -> None:
            await asyncio.sleep(0.02)

        handlers.row(SOURCE, columns=["status"])(awaiting)
    else:

        async def awaiting_slow(row: Row) -> None:
            user_id = row["user_id"]
            if user_id % 1000 == 3:
                await asyncio.Event().wait()
            await asyncio.sleep(2.0 if user_id % 100 == 7 else 0.02)

        handlers.row(SOURCE, columns=["status"])(awaiting_slow)
    return handlers


def worker(check: str, spans: int) -> tuple[Worker, FakeQueue]:
    src = SourceSettings.model_validate(
        {"name": SOURCE, "table": SOURCE, "id_column": "user_id", "due_column": "updated_time",
         "period_s": 10.0, "on_success": "touch", "mode": "ranges", "range_size": SPAN, "timeout_s": 5.0}
    )  # fmt: skip
    store = RangeStore(FakeDatabase(FakeTable(spans)), src)
    store.columns = frozenset({"user_id", "status", "updated_time"})
    store.column_types = {"user_id": "int", "status": "tinyint", "updated_time": "datetime"}
    store.ranges.columns = frozenset({"range_id", "lo", "hi", "rows_seen", "checked_at"})
    store.ranges._leases = FakeLeases(src.lease_s)  # type: ignore[assignment]
    queue = FakeQueue()
    settings = WorkerSettings(pop_batch=POP, concurrency=1)
    handler = registry(check).handler(SOURCE)
    return Worker({SOURCE: store}, {SOURCE: handler}, queue, settings), queue  # type: ignore[arg-type]


def drain(w: Worker, queue: FakeQueue, spans: int, attempt: int, *, hung: bool) -> None:
    """One round: every span popped, started, checked and acked (the hung users, `hung`: failed)."""
    queue.ready.extend(encode_entry(i + 1, attempt) for i in range(spans))
    while queue.ready or w.flights:
        w.tick()
    failed = w.counts["failed"]
    assert failed == (w.counts["timed_out"] if hung else 0), w.counts  # only the hung users fail
    assert w.counts["acked"] + failed == w.counts["started"] == spans * SPAN * attempt, w.counts


def instructions(spans: int) -> dict[str, float]:
    """Instructions per check of each check (callgrind: 1 and 3 rounds, the difference)."""
    per_check = {}
    with tempfile.TemporaryDirectory() as tmp:
        for check in ("batch", "async"):
            totals = []
            for rounds in (1, 3):
                out = Path(tmp) / f"{check}.{rounds}"
                cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
                cmd += [__file__, "--check", check, "--spans", str(spans), "--rounds", str(rounds)]
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
                found = re.search(r"Collected : (\d+)", done.stderr)
                assert found, done.stderr[-2000:]
                totals.append(int(found.group(1)))
            per_check[check] = (totals[1] - totals[0]) / (2 * spans * SPAN)
            print(f"{check}: {per_check[check]:,.0f} instructions per check", flush=True)
    return per_check


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", choices=("batch", "async", "async-slow"), default="batch")
    p.add_argument("--spans", type=int, default=20, help="spans of 1,000 users per round")
    p.add_argument("--rounds", type=int, default=1, help="times every span is checked, after a warm-up")
    p.add_argument("--instructions", action="store_true", help="both checks under callgrind (valgrind)")
    args = p.parse_args(argv)
    if args.instructions:
        instructions(args.spans)
        return 0
    collector.pause()
    w, queue = worker(args.check, args.spans)
    collector.resume()  # the collector as a worker process has it once started (frozen, tuned)
    hung = args.check == "async-slow"
    drain(w, queue, args.spans, 1, hung=hung)  # warm-up: first-use look-ups, the event loop, the thread pool
    started = time.process_time()
    for n in range(args.rounds):
        drain(w, queue, args.spans, n + 2, hung=hung)
    cpu = (time.process_time() - started) / (args.spans * SPAN * args.rounds)
    w.close()
    print(f"{args.check}: {args.rounds} x {args.spans * SPAN} checks, {cpu * 1e6:.2f} µs of CPU per check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
