"""Benchmark: what a worker's started records (issue 24.4) cost per batch, on the real Redis.

A worker that starts a batch of re-scan rows or spans adds its record to `{prefix}:started:<worker>`
in the MULTI that releases its pop's hold, and blanks (or deletes) it when the batch is over
(worker/started.py). This times that path (record, release, over) against the plain release it
replaces, per batch, in wall time and in this process's CPU, median of --runs:

    scripts/dev shell python bench/started_records.py
    scripts/dev shell python bench/started_records.py --batches 5000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from duecast.shared.entries import Entry, encode_entry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import load_settings
from duecast.worker.started import StartedLog

WORKER = "bench:1"


def per_batch(queue: ReadyQueue, entries: int, batches: int, *, recorded: bool) -> tuple[float, float]:
    """(wall µs, CPU µs) per batch of `entries` entries."""
    batch = [Entry(10**6 + i, 3) for i in range(entries)]
    raws = [encode_entry(e.id, e.attempt) for e in batch]  # as popped: the record is their join
    log = StartedLog(queue, WORKER)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        if recorded:
            field = log.add("users", batch, raws)
            log.release()
            log.over([field])
        else:
            queue.release_hold(WORKER)
    return (time.perf_counter() - wall) / batches * 1e6, (time.process_time() - cpu) / batches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    settings = load_settings()
    queue = ReadyQueue(connect_redis(settings.redis), Keys(f"bench-started-{uuid.uuid4().hex[:8]}"))
    try:
        for entries, what in ((2000, "row mode: 2,000 rows"), (20, "range mode: 20 spans of 100 rows")):
            extra = []
            for _ in range(args.runs):
                plain = per_batch(queue, entries, args.batches, recorded=False)
                named = per_batch(queue, entries, args.batches, recorded=True)
                extra.append((named[0] - plain[0], named[1] - plain[1]))
            wall = statistics.median(e[0] for e in extra)
            cpu = statistics.median(e[1] for e in extra)
            print(f"{what} per batch: +{wall:.0f} µs wall, +{cpu:.0f} µs worker CPU (median of {args.runs})")
    finally:
        queue.forget_started(WORKER)
        queue.release_hold(WORKER)


if __name__ == "__main__":
    main()
