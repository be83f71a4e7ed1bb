"""Wiring for `duecast web`: settings -> sampler thread + Flask app -> waitress, until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from waitress import create_server

from ...shared.api.app import load_registry
from ...shared.api.enqueue import Enqueuer
from ...shared.process import arguments, logs
from ...shared.process.loop import stop_on_signals
from ...shared.settings import Settings, WebSettings, load_settings
from ..history import History
from ..sampler import Sampler, SamplerThread
from .app import create_app
from .context import WebContext

log = logging.getLogger("duecast.cli.web")
MAX_HEADER_BYTES = 65_536  # request line and headers (waitress's default: 256 KiB)


def make_server(app: Any, web: WebSettings) -> Any:
    """waitress with every limit set from web.* (docs/observability.md, "Dashboard limits")."""
    return create_server(
        app,
        host=web.host,
        port=web.port,
        ident="duecast",
        threads=web.threads,
        connection_limit=web.connection_limit,
        channel_timeout=web.channel_timeout_s,
        # Idle connections are looked for this often: one lives channel_timeout_s to 4/3 of it.
        cleanup_interval=max(1, web.channel_timeout_s // 3),
        max_request_body_size=web.max_request_body_bytes,
        max_request_header_size=MAX_HEADER_BYTES,
        # poll(), not select(): select() cannot watch a socket numbered 1024 or more, which
        # connection_limit allows, and waitress's loop would stop on it.
        asyncore_use_poll=True,
    )


def build_context(settings: Settings, sampler: Sampler, app: str | None = None) -> WebContext:
    registry = load_registry(app) if app else None
    schedules = settings.jobs.schedules + (registry.schedules if registry else [])
    enqueuer = Enqueuer(settings, sampler.queue.client)
    history = History(settings.web.history_points)
    return WebContext(settings, history, schedules, wake=enqueuer.wake)


@contextmanager
def running(ctx: WebContext, sampler: Sampler) -> Iterator[int]:
    """Sample and serve in background threads for the block; yields the port (web.port 0: a free one)."""
    web = ctx.settings.web
    sampler_thread = SamplerThread(sampler, ctx.history, web.sample_interval_s)
    server = make_server(create_app(ctx), web)
    port = int(server.effective_port)
    thread = threading.Thread(target=server.run, name="duecast-web", daemon=True)
    sampler_thread.start()
    thread.start()
    try:
        yield port
    finally:
        server.close()
        thread.join(5)
        sampler_thread.close()


def main(argv: list[str] | None = None) -> int:
    parser = arguments.parser(prog="duecast web", description="Serve the web dashboard.")
    parser.add_argument("--host", help="address to listen on (overrides web.host)")
    parser.add_argument("--port", type=int, help="port to listen on (overrides web.port)")
    parser.add_argument("--app", help="module[:attribute] whose Registry declares recurring schedules")
    args = parser.parse_args(argv)
    settings = load_settings(args.config)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if overrides:
        web = WebSettings.model_validate({**settings.web.model_dump(), **overrides})
        settings = settings.model_copy(update={"web": web})
    logs.setup(settings.log_level, settings.log_format)
    sampler = Sampler.connect(settings)  # verified stores: an unmigrated table fails here, clearly
    ctx = build_context(settings, sampler, args.app)
    stop = threading.Event()
    stop_on_signals(stop)  # its handler sets no lock-taking Event itself (shared/process/bell.py)
    with running(ctx, sampler) as port:
        actions = "retry/discard on (web.token set)" if ctx.actions_enabled else "read-only (no web.token)"
        log.info(
            "dashboard on http://%s:%d/ (%s)",
            settings.web.host,
            port,
            actions,
            extra={"event": "web.started", "port": port},
        )
        stop.wait()
    log.info("dashboard stopped", extra={"event": "web.stopped"})
    return 0
