"""The dashboard's only job writes: retry or discard one dead job, or cancel one pending or running,
through admin.job_admin.JobAdmin.

Each is a GET confirmation page, then a POST that must carry web.token (typed by the operator, so a
forged cross-site POST cannot know it) and the confirmation flag. Every action is logged.
"""

from __future__ import annotations

import logging

from flask import Flask, abort, redirect, render_template, request
from werkzeug.wrappers import Response

from ...shared.states import STATE_NAMES, State
from ...shared.storage.admin.job_admin import Filter
from ...shared.storage.units import StorageError, access_denied
from .context import WebContext

log = logging.getLogger("duecast.cli.web")

# action -> (the states it applies to, what the confirmation says it does)
ACTIONS: dict[str, tuple[list[State], str]] = {
    "retry": ([State.DEAD], "runs it again now, with a fresh error budget"),
    "discard": ([State.DEAD], "deletes it for good, with its error"),
    # A job a run holds shows its run's state (JobAdmin.show); its own row is pending all along.
    "cancel": (
        [State.IDLE, State.DISPATCHED, State.RUNNING],
        "stops it for good: it never runs, or its running task is cancelled (an async one) or told "
        "(current_job().cancelled) and its outcome is not kept",
    ),
}


def register(app: Flask, ctx: WebContext) -> None:
    @app.get("/jobs/<int:job_id>/<action>")
    def confirm(job_id: int, action: str) -> tuple[str, int] | str:
        job = _job_for(ctx, job_id, action)
        return render_template("confirm.html", job=job, action=action, what=ACTIONS[action][1], error=None)

    @app.post("/jobs/<int:job_id>/<action>")
    def act(job_id: int, action: str) -> Response | tuple[str, int]:
        job = _job_for(ctx, job_id, action)
        if not ctx.token_ok(request.form.get("token", "")):
            log.warning(
                "refused to %s job %d: wrong token",
                action,
                job_id,
                extra={"event": "web.action_refused", "job_id": job_id, "action": action},
            )
            error = "That is not the token set in web.token; nothing changed."
            what = ACTIONS[action][1]
            return render_template("confirm.html", job=job, action=action, what=what, error=error), 403
        if request.form.get("confirm") != "yes":
            abort(400, "the confirmation is missing")
        states, _ = ACTIONS[action]
        admin = ctx.admin()
        flt = Filter(ids=[job_id], states=states)
        try:
            if action == "cancel":
                outcome = admin.cancel(Filter(ids=[job_id]))
            else:
                outcome = admin.discard(flt) if action == "discard" else admin.revive(flt)
        except StorageError as exc:
            if not access_denied(exc):
                raise
            return _read_only(ctx, job, action), 403
        log.info(
            "%s job %d from the dashboard: %d changed",
            action,
            job_id,
            outcome.changed,
            extra={"event": f"web.job_{action}", "job_id": job_id, "changed": outcome.changed},
        )
        if action == "retry" and outcome.changed:
            ctx.wake()
        if action == "discard" and outcome.changed:
            return redirect(f"/dead?discarded={job_id}", code=303)
        done = {"retry": "retried", "cancel": "cancelled"}[action] if outcome.changed else "unchanged"
        return redirect(f"/jobs/{job_id}?done={done}", code=303)


def _read_only(ctx: WebContext, job: dict[str, object], action: str) -> str:
    """The answer when the dashboard's MySQL account may only read (docs/security.md): a refusal
    that says so, in place of an error page."""
    user = ctx.settings.mysql.user
    log.warning(
        "refused to %s job %s: mysql.user %r may not write jobs (access denied)",
        action,
        job["id"],
        user,
        extra={"event": "web.action_refused", "job_id": job["id"], "action": action},
    )
    error = f"The dashboard's MySQL account ({user}) is read-only: it may not {action} jobs; nothing changed."
    return render_template("confirm.html", job=job, action=action, what=ACTIONS[action][1], error=error)


def _job_for(ctx: WebContext, job_id: int, action: str) -> dict[str, object]:
    """The job an action is asked for, or the HTTP error saying why it cannot be done."""
    if action not in ACTIONS:
        abort(404)
    if not ctx.actions_enabled:
        abort(403, "actions are off: set web.token (DUECAST_WEB__TOKEN) to retry or discard jobs here")
    job = ctx.admin().show(job_id)
    if job is None:
        abort(404, f"no job {job_id}")
    states, _ = ACTIONS[action]
    if State(int(str(job["dc_state"]))) not in states:
        state = STATE_NAMES[State(int(str(job["dc_state"])))]
        names = " or ".join(dict.fromkeys(STATE_NAMES[s] for s in states if s != State.DISPATCHED))
        abort(409, f"job {job_id} is {state}; {action} applies to {names} jobs only")
    return job
