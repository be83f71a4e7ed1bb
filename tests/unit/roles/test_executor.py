"""duecast.worker.executor.Executor: outcomes come back in row order, whatever the concurrency."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.worker.executor import Executor


@pytest.fixture(params=[1, 2, 3, 8])
def executor(request: pytest.FixtureRequest) -> Iterator[Executor]:
    ex = Executor(request.param)
    yield ex
    ex.close()


def _rows(n: int) -> list[Row]:
    return [{"id": i} for i in range(n)]


def _tag(row: Row) -> Ack:
    """An Ack that says which row it came from."""
    return Ack.touch(float(row["id"]))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 31, 32, 33, 100, 257])
def test_row_handler_outcomes_in_row_order(executor: Executor, n: int) -> None:
    out = executor.run(Handler("s", _tag, batch=False), _rows(n))
    assert out == [Ack.touch(float(i)) for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 5, 33, 100])
def test_batch_handler_outcomes_in_row_order(executor: Executor, n: int) -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def fn(rows: list[Row]) -> list[Ack]:
        with lock:
            calls.append(len(rows))
        return [_tag(r) for r in rows]

    out = executor.run(Handler("s", fn, batch=True), _rows(n))
    assert out == [Ack.touch(float(i)) for i in range(n)]
    assert sum(calls) == n  # every row handed to exactly one call


def test_failures_stay_with_their_rows(executor: Executor) -> None:
    def fn(row: Row) -> Ack:
        if row["id"] % 7 == 3:
            raise ValueError(f"row {row['id']}")
        return _tag(row)

    out = executor.run(Handler("s", fn, batch=False), _rows(60))
    for i, outcome in enumerate(out):
        if i % 7 == 3:
            assert isinstance(outcome, ValueError)
            assert str(outcome) == f"row {i}"
        else:
            assert outcome == Ack.touch(float(i))


def test_a_failing_batch_slice_fails_only_its_rows() -> None:
    ex = Executor(4)
    try:

        def fn(rows: list[Row]) -> list[Ack]:
            if any(r["id"] == 0 for r in rows):
                raise RuntimeError("slice with row 0")
            return [_tag(r) for r in rows]

        out = ex.run(Handler("s", fn, batch=True), _rows(40))
    finally:
        ex.close()
    failed = [i for i, o in enumerate(out) if isinstance(o, BaseException)]
    assert failed
    assert failed[0] == 0
    assert failed == list(range(len(failed)))  # one contiguous slice from the start
    assert len(failed) < 40
    assert out[len(failed) :] == [Ack.touch(float(i)) for i in range(len(failed), 40)]


def test_concurrency_one_runs_on_the_calling_thread() -> None:
    ex = Executor(1)
    names: set[str] = set()
    try:
        ex.run(Handler("s", lambda row: names.add(threading.current_thread().name), batch=False), _rows(50))
    finally:
        ex.close()
    assert names == {threading.current_thread().name}


@pytest.mark.parametrize("concurrency", [2, 4])
def test_concurrency_above_one_runs_rows_in_parallel(concurrency: int) -> None:
    """Each pool thread's first row waits at a barrier for all the others: it only opens if
    `concurrency` threads are inside the handler at the same time. A serial run would break it."""
    barrier = threading.Barrier(concurrency, timeout=10)
    names: set[str] = set()
    lock = threading.Lock()

    def fn(row: Row) -> Ack:
        name = threading.current_thread().name
        with lock:
            first = name not in names
            names.add(name)
        if first:
            barrier.wait()  # raises BrokenBarrierError (an outcome) if the others never come
        return _tag(row)

    ex = Executor(concurrency)
    try:
        out = ex.run(Handler("s", fn, batch=False), _rows(200))
    finally:
        ex.close()
    assert out == [Ack.touch(float(i)) for i in range(200)]
    assert len(names) == concurrency
    assert all(n.startswith("duecast-handler") for n in names)


def test_close_is_idempotent_enough_for_finally_blocks() -> None:
    ex = Executor(3)
    ex.run(Handler("s", _tag, batch=False), _rows(10))
    ex.close()
    ex.close()
    Executor(1).close()
