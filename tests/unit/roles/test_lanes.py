"""worker.lanes: a free handler thread takes a row of the source with fewest calls running, keeps a
thread for another source that had rows lately, and a source alone takes every thread."""

from __future__ import annotations

import threading
from collections import deque

from duecast.shared.api.handlers import Handler
from duecast.worker.flight import Flight
from duecast.worker.lanes import Item, Lanes
from tests.unit.roles.test_runner import _Batch


def _flight(source: str, n: int) -> Flight:
    handler = Handler(source, lambda row: None, batch=False)
    return Flight(source, object(), handler, _Batch([{"id": i} for i in range(n)]), limit_s=30.0)  # type: ignore[arg-type]


def _items(n: int) -> deque[Item]:
    return deque((i,) for i in range(n))


def _source(taken: tuple[Flight, Item] | None) -> str | None:
    return None if taken is None else taken[0].source


def test_a_source_alone_takes_every_thread_in_order() -> None:
    lanes = Lanes(3)
    jobs = _flight("jobs", 5)
    assert lanes.add(jobs, _items(5)) == 3  # three pullers, no more than threads
    taken = [lanes.take(None) for _ in range(3)]
    assert [t[1] for t in taken if t] == [(0,), (1,), (2,)]
    assert lanes.take("jobs") is not None
    assert lanes.take("jobs") is not None
    assert lanes.take("jobs") is None  # nothing waits: that puller ends
    assert lanes.pullers == 2


def test_a_free_thread_goes_to_the_source_with_fewest_calls_running() -> None:
    lanes = Lanes(4)
    lanes.add(_flight("jobs", 100), _items(100))
    assert [_source(lanes.take(None)) for _ in range(3)] == ["jobs"] * 3  # slow calls on 3 threads
    lanes.add(_flight("users", 3), _items(3))
    # Every thread that frees serves the users until none wait: they run 0 or 1, the jobs 2 or 3.
    assert _source(lanes.take(None)) == "users"
    assert _source(lanes.take("users")) == "users"
    assert _source(lanes.take("jobs")) == "users"
    assert _source(lanes.take("users")) == "jobs"


def test_a_thread_is_kept_for_a_source_that_had_rows_lately() -> None:
    lanes = Lanes(2)
    lanes.add(_flight("users", 1), _items(1))
    assert _source(lanes.take(None)) == "users"
    lanes.add(_flight("jobs", 10), _items(10))
    assert _source(lanes.take("users")) == "jobs"  # the users run nothing now: a job may start...
    got: list[str | None] = []
    second = threading.Thread(target=lambda: got.append(_source(lanes.take(None))))
    second.start()  # ...but not a second one: that would leave no thread for the users
    second.join(0.3)
    assert second.is_alive()
    assert not got
    lanes.add(_flight("users", 1), _items(1))  # the users' next rows take the kept thread at once
    second.join(5)
    assert got == ["users"]


def test_closing_ends_the_pullers_that_wait() -> None:
    lanes = Lanes(2)
    lanes.add(_flight("users", 1), _items(1))
    lanes.take(None)
    lanes.add(_flight("jobs", 10), _items(10))
    lanes.take("users")
    got: list[object] = []
    waiting = threading.Thread(target=lambda: got.append(lanes.take(None)))
    waiting.start()
    lanes.clear()
    waiting.join(5)
    assert got == [None]
    assert lanes.waiting == 0
