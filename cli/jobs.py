"""`duecast jobs ...`: the operator's view of and hands on the jobs table (show, list, retry, replay,
discard, cancel). Parsing and printing only; every statement runs in admin.job_admin.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from ..shared.api.enqueue import EnqueueError, Enqueuer
from ..shared.fanout.client import connect_redis
from ..shared.process import arguments
from ..shared.process.failures import EXIT_NO, EXIT_UNCONFIRMED, StartupError
from ..shared.settings import Settings, load_settings
from ..shared.states import STATE_NAMES, State
from ..shared.storage.admin.job_admin import STATES_BY_NAME, Filter, JobAdmin, Outcome
from ..shared.storage.db import Database
from .formats import plain, shown
from .status_view import fit

MAX_LIST = 10_000  # rows `duecast jobs list` prints at most
ERROR_MIN = 20  # columns the last error keeps in `jobs list` before the table is split instead
SHOWN_IDS = 10  # ids a retry, replay or discard that changed nothing explains one by one


def main(rest: list[str]) -> int:
    parser = arguments.parser("duecast jobs", "Inspect and act on one-off jobs.")
    sub = arguments.subcommands(parser)
    show = sub.add_parser("show", help="one job, with its payload and last error")
    show.add_argument("id", type=int, help="the job's id")
    listing = sub.add_parser("list", help="jobs matching a filter, newest first")
    _filters(listing, states=True)
    listing.add_argument("--limit", type=int, default=50, help=f"jobs to list at most (1-{MAX_LIST})")
    for name, help_ in (
        ("retry", "dead jobs -> pending now, with a fresh attempt budget"),
        ("replay", "done, dead or cancelled jobs -> pending again (needs jobs.retention_s for done ones)"),
        ("discard", "delete pending, done, dead or cancelled jobs for good"),
        ("cancel", "pending jobs (waiting, scheduled or in flight) -> cancelled, final"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("ids", nargs="*", type=int, help="job ids (or use filters / --all)")
        _filters(p, states=name not in ("retry", "cancel"))
        p.add_argument("--all", action="store_true", help="every job the action applies to")
        p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    args = parser.parse_args(rest)
    settings = load_settings(args.config)
    admin = JobAdmin(Database(settings.mysql), settings.jobs)
    console = Console()
    if args.action == "show":
        return _show(console, admin, args.id)
    flt = _filter(args)
    if args.action == "list":
        if not 1 <= args.limit <= MAX_LIST:
            raise EnqueueError(f"--limit must be 1-{MAX_LIST}, not {args.limit}")
        print_jobs(console, admin.find(flt, args.limit))
        return 0
    return _act(console, admin, args, flt, settings)


def _filters(p: argparse.ArgumentParser, *, states: bool) -> None:
    if states:
        states_ = sorted(STATES_BY_NAME)
        p.add_argument("--state", action="append", choices=states_, default=[], help="in this state (repeat)")
    p.add_argument("--queue", help="in this queue")
    p.add_argument("--task", help="of this task")
    when = "database time; ISO 8601, or a time ago: 30m, 1h, 2d"
    p.add_argument("--since", type=arguments.time_arg, metavar="TIME", help=f"created at or after ({when})")
    p.add_argument("--until", type=arguments.time_arg, metavar="TIME", help=f"created before ({when})")


def _filter(args: argparse.Namespace) -> Filter:
    return Filter(
        ids=list(getattr(args, "ids", []) or []),
        states=[STATES_BY_NAME[s] for s in getattr(args, "state", [])],
        queue=args.queue,
        task=args.task,
        since=args.since,
        until=args.until,
    )


def _act(console: Console, admin: JobAdmin, args: argparse.Namespace, flt: Filter, settings: Settings) -> int:
    narrowing = (flt.ids, flt.states, flt.queue, flt.task, flt.since, flt.until)
    if not any(narrowing) and not args.all:
        raise EnqueueError(f"`duecast jobs {args.action}` needs job ids, a filter, or --all")
    allowed = {
        "retry": [State.DEAD],
        "replay": [State.DONE, State.DEAD, State.CANCELLED],
        "discard": [State.IDLE, State.DONE, State.DEAD, State.CANCELLED],
        "cancel": [State.IDLE],
    }[args.action]
    flt = Filter(flt.ids, flt.states or allowed, flt.queue, flt.task, flt.since, flt.until)
    try:
        flt = flt.narrowed_to(allowed)
    except ValueError as exc:
        raise EnqueueError(f"{args.action}: {exc}") from exc
    total = admin.count(flt)
    if total == 0:
        console.print(f"{args.action}: nothing changed: {_why_none(admin, flt, allowed)}")
        return EXIT_NO
    if not _confirmed(console, args, flt, f"{args.action} {total:,} job(s)"):
        console.print("nothing changed")
        return EXIT_NO
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(args.action, total=total)
        step = lambda n: bar.advance(task, n)  # noqa: E731
        act = {"discard": admin.discard, "cancel": admin.cancel}.get(args.action, admin.revive)
        out = act(flt, step)
    _report(console, args.action, out)
    if args.action not in ("discard", "cancel") and out.changed:
        Enqueuer(settings, connect_redis(settings.redis)).wake()
    return 0


def _why_none(admin: JobAdmin, flt: Filter, allowed: list[State]) -> str:
    """Why an action matched nothing: the state of each job named by id (the first few), or that
    no job in the action's states matches the filter."""
    states = " or ".join(STATE_NAMES[s] for s in allowed)
    if not flt.ids:
        return f"no {states} job matches"
    shown = flt.ids[:SHOWN_IDS]
    found = {j["id"]: State(j["dc_state"]) for j in admin.find(Filter(ids=shown), len(shown))}
    said = [
        f"there is no job {i}"
        if i not in found
        else f"job {i} is {STATE_NAMES[found[i]]}" + (" but not in the filter" * (found[i] in allowed))
        for i in shown
    ]
    more = f" (and {len(flt.ids) - len(shown)} more)" if len(flt.ids) > len(shown) else ""
    return f"{'; '.join(said)}{more}; this applies to {states} jobs only"


def _confirmed(console: Console, args: argparse.Namespace, flt: Filter, what: str) -> bool:
    """Ids named one by one are confirmation enough (they bound the set); a filter or --all asks,
    unless --yes. Without a terminal to ask on, it refuses in one line (exit 4) rather than take
    an answer from a pipe."""
    if args.yes or flt.ids:
        return True
    if not sys.stdin.isatty():
        raise StartupError(
            f"{what} needs confirmation and there is no terminal to ask on; pass --yes", EXIT_UNCONFIRMED
        )
    try:
        return console.input(f"{what}? [y/N] ").strip().lower() in {"y", "yes"}
    except EOFError:
        return False


def _report(console: Console, action: str, out: Outcome) -> None:
    line = f"{action}: {out.changed:,} of {out.matched:,} job(s)"
    if out.skipped_unique:
        line += f"; {out.skipped_unique:,} left alone: an active job holds their unique key"
    if out.in_flight:
        line += f"; {out.in_flight:,} left alone: cancelled while running, their run has not ended yet"
    if out.changed < out.matched - out.skipped_unique - out.in_flight:
        line += "; the rest changed state meanwhile"
    console.print(line)


def _show(console: Console, admin: JobAdmin, job_id: int) -> int:
    job = admin.show(job_id)
    if job is None:
        console.print(f"no job {job_id}")
        return 1
    error = job.pop("last_error", None)
    table = Table(show_header=False, title=f"job {job_id}")
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold")  # a long payload folds onto more lines, never cut
    for key, value in job.items():
        value_shown = STATE_NAMES[State(value)] if key == "dc_state" else value
        # Text, not markup: a payload's `[...]` is data, and must neither vanish nor raise.
        table.add_row(
            "state" if key == "dc_state" else key, shown("-" if value_shown is None else value_shown)
        )
    console.print(table)
    if error:
        # The traceback below the table, as written: a table cell would cut its file paths to fit.
        console.print("last_error:")
        console.print(shown(str(error).rstrip(), lines=True), soft_wrap=True)
    return 0


def print_jobs(console: Console, jobs: list[dict[str, Any]]) -> None:
    """The jobs on one line each where the terminal allows: the last error gets the room the other
    columns leave (at least ERROR_MIN, wrapping below), or, when even that is too wide, the table
    is split by columns as `duecast status` splits its own (each part keeps the id)."""
    table = job_table(jobs, ERROR_MIN)
    spare = console.width - Measurement.get(console, console.options.update_width(10_000), table).maximum
    if spare < 0:
        console.print(*fit(table, console))
    else:
        console.print(job_table(jobs, ERROR_MIN + spare))


def job_table(jobs: list[dict[str, Any]], error_width: int | None = None) -> Table:
    """A queue or state every listed job shares is said once in the title, times drop the date they
    all share (said in the title too), and the last error wraps within `error_width` rather than
    being cut; `duecast jobs show ID` has the rest."""
    queues = {j["queue"] for j in jobs}
    states = {STATE_NAMES[State(j["dc_state"])] for j in jobs}
    (run_at, created), day = dates([j["run_at"] for j in jobs], [j["created_at"] for j in jobs])
    said = [f"{len(jobs)} job(s)"]
    said += [f"queue {plain(q)}" for q in queues if len(queues) == 1]
    said += [f"all {s}" for s in states if len(states) == 1 and len(jobs) > 1]
    if day:
        said.append(f"times on {day}")
    table = Table(title=Text(", ".join(said)), box=box.SIMPLE_HEAD, padding=0, show_edge=False)
    show_queue, show_state = len(queues) > 1, len(states) > 1 or len(jobs) == 1
    headers = ["id", *(["queue"] * show_queue), "task", *(["state"] * show_state), "errors", "run at"]
    for col in [*headers, "created"]:
        table.add_column(col, no_wrap=True, justify="right" if col == "id" else "left")
    # fold: a word too long for the column breaks onto the next line instead of ending in `…`
    table.add_column("last error", overflow="fold", max_width=error_width)
    for j, due, made in zip(jobs, run_at, created, strict=True):
        error = (j["last_error"] or "").strip().splitlines()
        cells: list[str | Text] = [str(j["id"]), *([shown(j["queue"])] * show_queue), shown(j["task"])]
        cells += [STATE_NAMES[State(j["dc_state"])]] * show_state
        last = shown(error[-1]) if error else ""
        table.add_row(*cells, f"{j['errors']}/{j['max_attempts']}", due, made, last)
    return table


def dates(*columns: list[Any]) -> tuple[list[list[str]], str]:
    """Each column's datetimes as text to the second, and last the day they all share: then the
    cells are times of day only (`14:03:07`), else `2026-01-31 14:03:07`; "" for a missing one."""
    every = [d for col in columns for d in col if isinstance(d, datetime)]
    days = {d.date() for d in every}
    form = "%H:%M:%S" if len(days) == 1 else "%Y-%m-%d %H:%M:%S"
    out = [[d.strftime(form) if isinstance(d, datetime) else "" for d in col] for col in columns]
    return out, str(next(iter(days))) if len(days) == 1 else ""
