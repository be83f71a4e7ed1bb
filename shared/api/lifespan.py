"""Handler resources: the start and stop hooks of a Registry (plain or `async def`), which a worker
process runs once, before its first handler and after its last (an aiohttp session, a connection pool).
Holds and checks them only; the worker (worker/lifespan.py) decides when and where they run.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

# `fn()` or `async def fn()`; what it returns is ignored.
Hook = Callable[[], object] | Callable[[], Awaitable[object]]


@dataclass
class Hooks:
    """A Registry's hooks, in the order declared: starts run in that order, stops in reverse."""

    start: list[Hook] = field(default_factory=list)
    stop: list[Hook] = field(default_factory=list)

    def add(self, when: str, fn: Hook) -> Hook:
        if not callable(fn) or _required_args(fn):
            raise ValueError(f"an on_{when} hook is called with no arguments; {_name(fn)} takes some")
        hooks = self.start if when == "start" else self.stop
        if fn in hooks:
            raise ValueError(f"{_name(fn)} is registered twice as an on_{when} hook")
        hooks.append(fn)
        return fn

    def include(self, other: Hooks) -> None:
        for fn in other.start:
            self.add("start", fn)
        for fn in other.stop:
            self.add("stop", fn)


def is_async(fn: Hook) -> bool:
    return inspect.iscoroutinefunction(fn)


def hook_name(fn: Hook) -> str:
    return _name(fn)


def _name(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _required_args(fn: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return False
    return any(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        for p in params
    )
