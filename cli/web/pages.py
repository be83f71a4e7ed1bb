"""The dashboard's read-only pages: overview, one source or queue, workers, dead jobs, a job, schedules.

Overview and source pages render the sampler's latest readings (no query per request, however many
people watch); the others query MySQL through read-only stores on the request thread's connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from flask import Flask, abort, render_template, request
from markupsafe import Markup
from werkzeug.exceptions import HTTPException

from ...shared.monitor.coverage import unserved, unserved_line
from ...shared.monitor.status import SourceSnapshot
from ...shared.process.runtime import is_job_queue
from ...shared.settings import TOPICS_SOURCE, Settings
from ...shared.states import STATE_NAMES, State
from ...shared.storage.admin.job_admin import Filter
from ...shared.storage.worker_registry import WorkerRegistry, bad_rows_line
from .. import formats
from ..history import History, Point, lag_s
from . import limits_view, pause_actions
from .charts import COLLECTING, Series, line_chart
from .context import WebContext

DEAD_PAGE = 100  # dead jobs listed per page, newest first


@dataclass(frozen=True)
class SourceRow:
    snap: SourceSnapshot
    kind: str
    rates: dict[str, float]
    lag_s: float | None

    @property
    def name(self) -> str:
        return self.snap.name

    @property
    def failing(self) -> str:
        """Of a re-scan source's checks, the share that failed since the last reading (at the first
        reading, since the counters began)."""
        return formats.failing(self.snap.freshness, self.rates, self.snap.counters)


def overview_notes(rows: list[SourceRow]) -> dict[str, bool]:
    """Which notes the overview explains under its table: only what the table shows."""
    shown = [r.snap.freshness for r in rows]
    return {
        "estimated": formats.estimated(shown),  # the `≈` of a share over InnoDB's estimate
        "first_pass": any(f is not None and f.first_pass is not None for f in shown),
    }


def kind(settings: Settings, name: str) -> str:
    if is_job_queue(name):
        return "job queue"
    if name.startswith(f"{TOPICS_SOURCE}."):
        return "topic consumer group"
    src = settings.source(name)
    if src.period_s > 0:
        return f"re-scan every {src.period_s:g} s ({src.mode})"
    return "one-off rows"


def _rows(ctx: WebContext) -> list[SourceRow]:
    reading = ctx.history.latest()
    if reading is None:
        return []
    return [
        SourceRow(s, kind(ctx.settings, s.name), ctx.history.current_rates(s.name), lag_s(s))
        for s in reading.sources
    ]


def _series(history: History, names: list[str], value: Callable[[Point], float | None]) -> list[Series]:
    return [Series(name, [(p.at, value(p)) for p in history.series(name)]) for name in names]


def plotted_lag(p: Point) -> float | None:
    """A lag the chart can draw: none while the oldest due row was never checked (range mode's first
    pass), whose "lag" is the years since the never-checked date and would flatten every real one."""
    return None if p.lag_s is None or p.lag_s >= formats.NEVER_S else p.lag_s


def lag_placeholder(points: list[Point]) -> str:
    if points and all(p.lag_s is not None and p.lag_s >= formats.NEVER_S for p in points[-2:]):
        return "no lag to draw: rows never checked yet are due (first pass)"
    return COLLECTING


def overview_charts(history: History, names: list[str]) -> dict[str, Markup]:
    now = time.time()
    lag = _series(history, names, plotted_lag)
    recent = [p for name in names for p in list(history.series(name))[-2:]]
    return {
        "throughput": line_chart(
            _series(history, names, lambda p: p.rates.get("acked")),
            title="finished per second (rows checked, jobs done)",
            now=now,
            fmt=formats.rate,
        ),
        "lag": line_chart(
            lag,
            title="lag: how long the oldest due row or job has waited",
            now=now,
            fmt=formats.axis_seconds,
            placeholder=lag_placeholder(recent),
        ),
    }


def source_charts(history: History, name: str, rescan: bool, unit: str = "rows") -> dict[str, Markup]:
    """A source's charts. Each chart has one unit: finished and failed count rows (jobs, messages),
    while a range-mode dispatcher claims ranges, so claims get a chart of their own."""
    now = time.time()
    points = list(history.series(name))
    done_unit = "rows" if unit == "ranges" else unit

    def rate(field: str) -> list[tuple[float, float | None]]:
        return [(p.at, p.rates.get(field)) for p in points]

    charts = {
        "throughput": line_chart(
            [Series("finished", rate("acked"), "done"), Series("failed", rate("failed"), "failed")],
            title=f"{done_unit} per second: finished, failed",
            now=now,
            fmt=formats.rate,
        ),
        "claimed": line_chart(
            [Series(f"claimed ({unit})", rate("claimed"))],
            title=f"{unit} claimed per second",
            now=now,
            fmt=formats.rate,
        ),
        "lag": line_chart(
            [Series("lag", [(p.at, plotted_lag(p)) for p in points])],
            title="lag",
            now=now,
            fmt=formats.axis_seconds,
            placeholder=lag_placeholder(points),
        ),
        "backlog": line_chart(
            [
                Series(f"due ({unit})", [(p.at, float(p.backlog)) for p in points]),
                Series(f"in flight ({unit})", [(p.at, float(p.in_flight)) for p in points]),
            ],
            title=f"due backlog and in flight, in {unit}",
            now=now,
        ),
    }
    if rescan:
        charts["freshness"] = line_chart(
            [Series("checked within period + 1 s", [(p.at, p.fresh_share) for p in points])],
            title="share of rows checked within period + 1 s",
            now=now,
            fmt=lambda v: f"{v:.0%}",
            y_max=1.0,
        )
    return charts


def register(app: Flask, ctx: WebContext) -> None:
    _register_sources(app, ctx)
    _register_jobs(app, ctx)

    def error_page(err: HTTPException) -> tuple[str, int]:
        code = err.code or 500
        return render_template("error.html", title=err.name, message=err.description), code

    for code in (400, 403, 404, 405, 409):
        app.register_error_handler(code, error_page)


def _register_sources(app: Flask, ctx: WebContext) -> None:
    """The pages about sources, queues and workers (the endpoints keep their function names)."""

    @app.get("/")
    def overview() -> str:
        rows = _rows(ctx)
        names = [r.name for r in rows]
        registry = WorkerRegistry(ctx.db(), ctx.settings.worker)
        live = registry.alive()
        return render_template(
            "overview.html",
            bad_workers=bad_rows_line(registry.bad_rows) if registry.bad_rows else None,
            unserved=[unserved_line(s) for s in unserved([s.name for s in ctx.settings.all_sources()], live)],
            sources=[r for r in rows if not is_job_queue(r.name)],
            queues=[r for r in rows if is_job_queue(r.name)],
            charts=overview_charts(ctx.history, names),
            paused=pause_actions.paused(ctx),
            limits=limits_view.states(ctx),
            readings=len(ctx.history),
            **overview_notes(rows),
        )

    @app.get("/sources/<name>")
    def source(name: str) -> str:
        row = next((r for r in _rows(ctx) if r.name == name), None)
        if row is None:
            abort(404, f"no source or queue named {name!r} (or no reading of it yet)")
        rescan = row.snap.freshness is not None
        queue = name.split(".", 1)[1] if is_job_queue(name) else None
        return render_template(
            "source.html",
            row=row,
            queue=queue,
            charts=source_charts(ctx.history, name, rescan, row.snap.db.unit),
            pausable=pause_actions.target_of(ctx.settings, name) is not None,
            paused_since=pause_actions.paused_since(ctx, name),
            limit=limits_view.of(ctx, name),
            keys=limits_view.keys_of(ctx, queue),
            can_act=ctx.settings.web.token is not None,
        )

    @app.get("/workers")
    def workers() -> str:
        registry = WorkerRegistry(ctx.db(), ctx.settings.worker)
        live = registry.alive()
        bad = bad_rows_line(registry.bad_rows) if registry.bad_rows else None
        return render_template("workers.html", workers=ctx.dashboard().workers(), live=live, bad_workers=bad)

    @app.get("/healthz")
    def healthz() -> dict[str, object]:
        return {"status": "ok", "readings": len(ctx.history)}


def _register_jobs(app: Flask, ctx: WebContext) -> None:
    """The pages about jobs: dead ones, one job, and the recurring schedules."""

    @app.get("/dead")
    def dead() -> str:
        queue = request.args.get("queue") or None
        task = request.args.get("task") or None
        flt = Filter(states=[State.DEAD], queue=queue, task=task)
        jobs = ctx.admin().find(flt, limit=DEAD_PAGE) if ctx.settings.jobs.enabled else []
        return render_template(
            "dead.html", jobs=jobs, queue=queue, task=task, queues=ctx.settings.jobs.queues, page=DEAD_PAGE
        )

    @app.get("/jobs/<int:job_id>")
    def job(job_id: int) -> str:
        found = ctx.admin().show(job_id) if ctx.settings.jobs.enabled else None
        if found is None and request.args.get("done") == "retried":
            # A free worker can run a retried job before the redirect here arrives.
            return render_template("retried.html", job_id=job_id)
        if found is None:
            abort(404, f"no job {job_id}: it finished and was deleted, was discarded, or never existed")
        return render_template(
            "job.html", job=found, state=STATE_NAMES[State(found["dc_state"])], done=request.args.get("done")
        )

    @app.get("/schedules")
    def schedules() -> str:
        return render_template("schedules.html", schedules=ctx.dashboard().schedules(ctx.schedules))


def last_line(text: str | None) -> str:
    """An error's last non-empty line: the exception and its message, after the traceback."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
