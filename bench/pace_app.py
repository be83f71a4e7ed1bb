"""The workers' handler module for bench/rescan.py: the demo's check, counting the checks of each
tenth of a wall-clock second where they run, written to $DUECAST_BENCH_PACE_DIR at the worker's stop.

The acked counters the demo samples reach Redis every 0.5 s per worker, so a 1-s window read from
them is off by up to that much; counting in the handler is the pace the called service would see.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from duecast import Ack, Registry, Row
from duecast.examples.block_check import check_users

handlers = Registry()
_per_tenth: Counter[int] = Counter()  # tenths: where in its second a claim's checks land shows


@handlers.batch("user_block_status", columns=["status"])
def counted_check(rows: list[Row]) -> list[Ack]:
    _per_tenth[int(time.time() * 10)] += len(rows)
    return check_users(rows)


@handlers.on_stop
def write_counts() -> None:
    folder = os.environ.get("DUECAST_BENCH_PACE_DIR")
    if folder:
        path = Path(folder) / f"{os.getpid()}.json"
        path.write_text(json.dumps({"tenths": {str(k): v for k, v in _per_tenth.items()}}))
