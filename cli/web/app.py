"""The dashboard's Flask application: its pages (duecast.cli.web.pages), its actions (retry and
discard: duecast.cli.web.actions; pause and resume: pause_actions), strict security headers, and
template filters. No I/O at import time.
"""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Flask, Response

from .. import formats
from . import actions, pages, pause_actions, topics_page
from .context import WebContext

# Scripts, styles and images only from this server; no inline script; never framed.
_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


def create_app(ctx: WebContext) -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = 16 * 1024  # a form of a token and a flag
    app.jinja_env.filters.update(
        count=formats.count,
        duration=formats.duration,
        rate=formats.rate,
        share=formats.share,
        staleness=lambda f: "-" if f is None else formats.duration(f.worst_staleness_s),
        utc=_utc,
        last_line=pages.last_line,
    )
    app.jinja_env.globals.update(refresh_s=ctx.settings.web.refresh_s, actions_enabled=ctx.actions_enabled)
    pages.register(app, ctx)
    topics_page.register(app, ctx)
    actions.register(app, ctx)
    pause_actions.register(app, ctx)

    @app.after_request
    def headers(resp: Response) -> Response:
        resp.headers["Content-Security-Policy"] = _CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers.setdefault("Cache-Control", "no-store")
        return resp

    return app


def _utc(value: object) -> str:
    """A database DATETIME (naive, in the server's time zone) or an aware time, to the second."""
    if isinstance(value, datetime):
        shown = value.astimezone(UTC) if value.tzinfo else value
        return shown.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if value.tzinfo else "")
    return "-" if value is None else str(value)
