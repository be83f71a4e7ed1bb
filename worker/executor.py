"""Runs a handler over a batch's rows, on a thread pool when concurrency > 1.

Owns parallelism only: outcomes come back in row order; it never touches MySQL or Redis.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler

_SLICES_PER_THREAD = 4  # more slices than threads keeps threads busy when rows differ in cost


class Executor:
    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._pool = ThreadPoolExecutor(concurrency, "duecast-handler") if concurrency > 1 else None

    def run(self, handler: Handler, rows: list[Row]) -> list[Ack | BaseException]:
        if self._pool is None or len(rows) < 2:
            return handler.run(rows)
        n = min(len(rows), self.concurrency * _SLICES_PER_THREAD)
        size = -(-len(rows) // n)
        slices = [rows[i : i + size] for i in range(0, len(rows), size)]
        out: list[Ack | BaseException] = []
        for part in self._pool.map(handler.run, slices):
            out.extend(part)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
