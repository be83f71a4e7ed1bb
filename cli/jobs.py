"""`duecast jobs ...`: the operator's view of and hands on the jobs table (show, list, retry, replay,
discard). Parsing and printing only; every statement runs in admin.job_admin.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from ..shared.api.enqueue import EnqueueError, Enqueuer
from ..shared.fanout.client import connect_redis
from ..shared.process.failures import EXIT_NO, EXIT_UNCONFIRMED, StartupError
from ..shared.settings import Settings, load_settings
from ..shared.states import STATE_NAMES, State
from ..shared.storage.admin.job_admin import STATES_BY_NAME, Filter, JobAdmin, Outcome
from ..shared.storage.db import Database

MAX_LIST = 10_000  # rows `duecast jobs list` prints at most


def main(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="duecast jobs", description="Inspect and act on one-off jobs.")
    parser.add_argument("--config", help="TOML settings file (else DUECAST_CONFIG)")
    sub = parser.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show", help="one job, with its payload and last error")
    show.add_argument("id", type=int)
    listing = sub.add_parser("list", help="jobs matching a filter, newest first")
    _filters(listing, states=True)
    listing.add_argument("--limit", type=int, default=50)
    for name, help_ in (
        ("retry", "dead jobs -> pending now, with a fresh attempt budget"),
        ("replay", "done or dead jobs -> pending again (needs jobs.retention_s for done ones)"),
        ("discard", "delete pending, done or dead jobs for good"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("ids", nargs="*", type=int, help="job ids (or use filters / --all)")
        _filters(p, states=name != "retry")
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
        console.print(_table(admin.find(flt, args.limit)))
        return 0
    return _act(console, admin, args, flt, settings)


def _filters(p: argparse.ArgumentParser, *, states: bool) -> None:
    if states:
        p.add_argument("--state", action="append", choices=sorted(STATES_BY_NAME), default=[])
    p.add_argument("--queue")
    p.add_argument("--task")
    p.add_argument("--since", type=datetime.fromisoformat, help="created at or after (database time)")
    p.add_argument("--until", type=datetime.fromisoformat, help="created before (database time)")


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
        "replay": [State.DONE, State.DEAD],
        "discard": [State.IDLE, State.DONE, State.DEAD],
    }[args.action]
    flt = Filter(flt.ids, flt.states or allowed, flt.queue, flt.task, flt.since, flt.until)
    try:
        flt = flt.narrowed_to(allowed)
    except ValueError as exc:
        raise EnqueueError(f"{args.action}: {exc}") from exc
    total = admin.count(flt)
    if total == 0:
        console.print(f"{args.action}: no job matches")
        return 0
    if not _confirmed(console, args, flt, f"{args.action} {total:,} job(s)"):
        console.print("nothing changed")
        return EXIT_NO
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(args.action, total=total)
        step = lambda n: bar.advance(task, n)  # noqa: E731
        out = admin.discard(flt, step) if args.action == "discard" else admin.revive(flt, step)
    _report(console, args.action, out)
    if args.action != "discard" and out.changed:
        Enqueuer(settings, connect_redis(settings.redis)).wake()
    return 0


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
    if out.changed < out.matched - out.skipped_unique:
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
        shown = STATE_NAMES[State(value)] if key == "dc_state" else value
        # Text, not markup: a payload's `[...]` is data, and must neither vanish nor raise.
        table.add_row("state" if key == "dc_state" else key, Text("-" if shown is None else str(shown)))
    console.print(table)
    if error:
        # The traceback below the table, as written: a table cell would cut its file paths to fit.
        console.print("last_error:")
        console.print(Text(str(error).rstrip()), soft_wrap=True)
    return 0


def _table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{len(jobs)} job(s)")
    for col in ("id", "queue", "task", "state", "errors", "run_at", "created_at", "last error"):
        table.add_column(col)
    for j in jobs:
        error = (j["last_error"] or "").strip().splitlines()
        table.add_row(
            str(j["id"]),
            j["queue"],
            j["task"],
            STATE_NAMES[State(j["dc_state"])],
            f"{j['errors']}/{j['max_attempts']}",
            str(j["run_at"]),
            str(j["created_at"]),
            error[-1][:80] if error else "",
        )
    return table


# ---------------------------------------------------------------- enqueue
