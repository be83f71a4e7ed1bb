"""The dashboard's pause and resume of a source, a job queue, a consumer group (from its page) or a
job task (from a job's page; resumed from the overview) (shared.api.pauses).

As retry and discard (actions.py): a GET confirmation page, then a POST that must carry web.token
(typed by the operator, so a forged cross-site POST cannot know it) and the confirmation flag.
"""

from __future__ import annotations

import datetime as dt
import logging
from urllib.parse import quote

from flask import Flask, abort, redirect, render_template, request
from werkzeug.wrappers import Response

from ...shared.api import pauses
from ...shared.settings import JOBS_SOURCE, Settings
from ...shared.storage.pause_store import PauseStore
from ...shared.storage.units import StorageError, access_denied
from .context import WebContext

log = logging.getLogger("duecast.cli.web")
VERBS = ("pause", "resume")


def target_of(settings: Settings, source: str) -> tuple[str, tuple[str, ...]] | None:
    """What `duecast pause` calls the dispatch source a page shows: (kind, names), or None."""
    if any(s.name == source for s in settings.sources):
        return "source", (source,)
    if settings.jobs.enabled and source.startswith(f"{JOBS_SOURCE}."):
        return "queue", (source.split(".", 1)[1],)
    for g in settings.topics.groups:
        if g.mode == "cluster" and g.source == source:
            return "group", (g.topic, g.name)
    return None


def paused(ctx: WebContext) -> list[pauses.Pause]:
    """What is paused now; none when the pauses table is not there yet (or not readable)."""
    try:
        return PauseStore(ctx.db()).list()
    except StorageError:
        return []


def paused_since(ctx: WebContext, source: str) -> dt.datetime | None:
    """When the source was paused, or None."""
    found = [p for p in paused(ctx) if p.source == source]
    return found[0].paused_at if found else None


def register(app: Flask, ctx: WebContext) -> None:
    @app.get("/sources/<name>/<verb>")
    def confirm_pause(name: str, verb: str) -> str:
        kind, names = _target(ctx, name, verb)
        return _confirm(kind, names, verb, f"/sources/{name}", None)

    @app.post("/sources/<name>/<verb>")
    def pause_or_resume(name: str, verb: str) -> Response | tuple[str, int]:
        kind, names = _target(ctx, name, verb)
        return _act(ctx, kind, names, verb, f"/sources/{name}", source=name)

    # A task has no page: paused from a job's page, resumed from the overview.
    @app.get("/tasks/<path:name>/<verb>")
    def confirm_task_pause(name: str, verb: str) -> str:
        _allowed(ctx, verb)
        return _confirm("task", (name,), verb, f"/tasks/{quote(name)}", None)

    @app.post("/tasks/<path:name>/<verb>")
    def task_pause_or_resume(name: str, verb: str) -> Response | tuple[str, int]:
        _allowed(ctx, verb)
        return _act(ctx, "task", (name,), verb, f"/tasks/{quote(name)}", source="")


def _confirm(kind: str, names: tuple[str, ...], verb: str, base: str, error: str | None) -> str:
    what = f"{kind} {' '.join(names)}"
    back = "/" if kind == "task" else base
    return render_template("pause.html", base=base, back=back, verb=verb, what=what, error=error)


def _act(
    ctx: WebContext, kind: str, names: tuple[str, ...], verb: str, base: str, *, source: str
) -> Response | tuple[str, int]:
    """The POST: web.token and the confirmation flag, then pause or resume; back to its page."""
    what = f"{kind} {' '.join(names)}"
    if not ctx.token_ok(request.form.get("token", "")):
        log.warning(
            "refused to %s %s: wrong token",
            verb,
            what,
            extra={"event": "web.action_refused", "source": source, "action": verb},
        )
        error = "That is not the token set in web.token; nothing changed."
        return _confirm(kind, names, verb, base, error), 403
    if request.form.get("confirm") != "yes":
        abort(400, "the confirmation is missing")
    try:
        changed = (pauses.resume if verb == "resume" else pauses.pause)(ctx.settings, kind, *names)
    except pauses.PauseError as exc:
        return _confirm(kind, names, verb, base, f"{exc}; nothing changed."), 404
    except StorageError as exc:
        if not access_denied(exc):
            raise
        error = f"The dashboard's MySQL account ({ctx.settings.mysql.user}) is read-only; nothing changed."
        return _confirm(kind, names, verb, base, error), 403
    log.info(
        "%s %s from the dashboard: %s",
        verb,
        what,
        "done" if changed else "unchanged",
        extra={"event": f"web.{verb}", "source": source, "changed": changed},
    )
    page = "/" if kind == "task" else base
    return redirect(f"{page}?done={verb + 'd' if changed else 'unchanged'}", code=303)


def _allowed(ctx: WebContext, verb: str) -> None:
    if verb not in VERBS:
        abort(404)
    if ctx.settings.web.token is None:
        abort(403, "actions are off: set web.token (DUECAST_WEB__TOKEN) to pause or resume here")


def _target(ctx: WebContext, name: str, verb: str) -> tuple[str, tuple[str, ...]]:
    _allowed(ctx, verb)
    found = target_of(ctx.settings, name)
    if found is None:
        abort(404, f"nothing named {name!r} can be paused")
    return found
