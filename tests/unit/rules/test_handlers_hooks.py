"""Registry.on_start / on_stop: what is accepted, how apps combine, and how the worker runs them
(worker/lifespan.py): async ones on the handlers' event loop, starts in order, stops in reverse, a
failed start one line naming the hook, a failed stop logged while the others still run."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from duecast import Registry
from duecast.shared.process.failures import StartupError
from duecast.worker.lifespan import run_start, run_stop
from duecast.worker.runner import Completions, LoopRunner


def test_hooks_take_no_arguments_and_register_once() -> None:
    app = Registry()
    with pytest.raises(ValueError, match="called with no arguments"):
        app.on_start(lambda session: None)
    hook = app.on_stop(lambda: None)
    with pytest.raises(ValueError, match="registered twice"):
        app.on_stop(hook)


def test_included_apps_bring_their_hooks() -> None:
    a, b = Registry(), Registry()
    first, second = a.on_start(lambda: None), b.on_start(lambda: None)
    a.include(b)
    assert a.hooks.start == [first, second]


def test_the_worker_runs_async_hooks_on_the_handlers_loop_and_stops_in_reverse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Registry()
    seen: list[str] = []
    loops: list[asyncio.AbstractEventLoop] = []

    @app.on_start
    def plain() -> None:
        seen.append(f"start plain on {threading.current_thread().name}")

    @app.on_start
    async def on_loop() -> None:
        loops.append(asyncio.get_running_loop())
        seen.append(f"start async on {threading.current_thread().name}")

    @app.on_stop
    def broken() -> None:
        raise RuntimeError("cannot close")

    @app.on_stop
    async def closing() -> None:
        seen.append("stop async")

    runner = LoopRunner(Completions(), lambda source: lambda seconds: None)
    try:
        run_start(app.hooks, runner)
        with caplog.at_level(logging.ERROR, "duecast.worker"):
            run_stop(app.hooks, runner)
        assert runner.run(asyncio.sleep(0, "same loop")) == "same loop"
        assert runner._loop is loops[0]  # where async handlers run
    finally:
        runner.close()
    assert seen == [
        f"start plain on {threading.current_thread().name}",
        "start async on duecast-loop",
        "stop async",  # the last registered stops first; the failed one after it did not stop it
    ]
    assert "on_stop hook" in caplog.text
    assert "cannot close" in caplog.text


def test_a_failed_start_hook_is_one_line_naming_it() -> None:
    app = Registry()

    @app.on_start
    async def open_pool() -> None:
        raise ConnectionRefusedError("pool.internal:5432")

    runner = LoopRunner(Completions(), lambda source: lambda seconds: None)
    try:
        with pytest.raises(StartupError, match=r"on_start hook .*open_pool failed: ConnectionRefusedError"):
            run_start(app.hooks, runner)
    finally:
        runner.close()
