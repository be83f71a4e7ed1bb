"""The dashboard's topics page: consumer groups (backlog, lag, in flight, dead letters, consumption
timeouts, retention trouble, broadcast members) and topics ranked by volume. Queried on request, on the
request thread's connection, through shared.storage.topic_status (bounded index reads, no scans).
"""

from __future__ import annotations

from flask import Flask, render_template

from ...shared.storage.topic_status import TopicMonitor
from .context import WebContext


def register(app: Flask, ctx: WebContext) -> None:
    @app.get("/topics")
    def topics() -> str:
        declared = bool(ctx.settings.topics.names)
        monitor = TopicMonitor(ctx.db(), ctx.settings.topics)
        return render_template(
            "topics.html",
            declared=declared,
            groups=monitor.groups() if declared else [],
            volumes=monitor.volumes() if declared else [],
            timeouts={g.source: g.timeout_s for g in ctx.settings.topics.groups},
        )
