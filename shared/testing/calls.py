"""One call of a user's handler as a worker makes it, with no server: a plain function on a thread of
its own under its time limit, an `async def` one on an event loop (cancelled at its limit), and what
the worker would make of the result: an Ack it accepts, or a failure. Nothing here keeps state.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..acks import Ack, Row
from ..api.outcomes import TimedOut
from ..errors import DuecastError

T = TypeVar("T")
Outcome = Ack | BaseException


class TestingError(DuecastError):
    """A test set up in a way no worker could run (a transactional task without a cursor, a source
    with no handler...): the test's mistake, said in one line."""

    __test__ = False  # not a test class, whatever pytest's pattern says


def on_thread(call: Callable[[], T], limit_s: float, source: str) -> T | BaseException:
    """`call()` on a thread of its own, as the worker's handler threads run plain handlers: its
    result, what it raised (BaseException too: SystemExit from user code is a failure of that call),
    or TimedOut when it runs past `limit_s` (the thread is left to finish, as the worker does)."""
    box: list[T | BaseException] = []

    def target() -> None:
        try:
            box.append(call())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, name=f"duecast-testing-{source}", daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        return TimedOut(source, limit_s)
    return box[0]


async def on_loop(call: Callable[[], Awaitable[T]], limit_s: float, source: str) -> T | BaseException:
    """An `async def` handler's call on the running loop, cancelled at `limit_s` as the worker does."""
    try:
        return await asyncio.wait_for(call(), limit_s)
    except TimeoutError:
        return TimedOut(source, limit_s)
    except asyncio.CancelledError:
        raise  # the test itself is being cancelled: not the handler's outcome
    except BaseException as exc:
        return exc


def run_coroutine(call: Callable[[], Awaitable[T]], limit_s: float, source: str) -> T | BaseException:
    """`on_loop` from synchronous code: on a new event loop, or, when this thread already runs one
    (a sync helper called from an async test), on a new loop in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(on_loop(call, limit_s, source))
    return on_thread(lambda: asyncio.run(on_loop(call, limit_s, source)), limit_s + 5.0, source)


def as_outcome(value: Any) -> Outcome:
    """A handler's return value as the worker takes it: None is Ack.default(), an Ack itself, and
    anything else a failure of that call (TypeError, as the worker's)."""
    if value is None:
        return Ack.default()
    if isinstance(value, Ack | BaseException):
        return value
    return TypeError(f"a handler must return an Ack or None, not {type(value).__name__}")


def row_copy(row: Row) -> Row:
    """What the handler gets: a dict of its own (a handler mutating it changes nothing we keep)."""
    return dict(row)
