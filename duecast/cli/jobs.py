"""`duecast jobs ...` and `duecast enqueue --file`: the operator's view of and hands on the jobs table.

Parsing and printing only; every statement runs in admin.job_admin / shared.api.enqueue.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from duecast.admin.job_admin import STATES_BY_NAME, Filter, JobAdmin, Outcome
from duecast.shared.api.enqueue import EnqueueError, Enqueuer, Job, JobRow, OnDuplicate, encode
from duecast.shared.api.handlers import load_registry
from duecast.shared.fanout.queue import connect_redis
from duecast.shared.process.failures import EXIT_NO, EXIT_UNCONFIRMED, StartupError
from duecast.shared.settings import JOBS_SOURCE, Settings, load_settings
from duecast.shared.states import STATE_NAMES, State
from duecast.shared.storage.db import Database
from duecast.shared.storage.worker_registry import WorkerRegistry

FILE_CHUNK = 5000  # rows validated / written per progress step
MAX_LIST = 10_000  # rows `duecast jobs list` prints at most
MERGES_SHOWN = 5  # merged lines named in `duecast enqueue --file`'s summary


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
    table = Table(show_header=False, title=f"job {job_id}")
    for key, value in job.items():
        shown = STATE_NAMES[State(value)] if key == "dc_state" else value
        table.add_row("state" if key == "dc_state" else key, "" if shown is None else str(shown))
    console.print(table)
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


def enqueue_main(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="duecast enqueue",
        description="Enqueue one job, or every job of a JSON Lines file in one transaction.",
    )
    parser.add_argument("task", nargs="?", help="task name (not with --file)")
    parser.add_argument("--payload", default="null", help="the job's JSON payload (default null)")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds until it is due")
    parser.add_argument("--priority", type=int, default=0, help="0-9, 0 runs first")
    parser.add_argument("--max-attempts", type=int)
    parser.add_argument("--unique-key")
    parser.add_argument("--on-duplicate", choices=["error", "keep"], default="error")
    parser.add_argument(
        "--file",
        type=Path,
        help='JSON Lines, one job per line: {"task": ..., "payload": ..., "queue": ..., "delay_s": ..., '
        '"priority": ..., "max_attempts": ..., "unique_key": ...}; all are enqueued or none',
    )
    parser.add_argument(
        "--app",
        help="module[:attr] of the task Registry to check task names against (default: worker.app, "
        "else the tasks the queue's live workers serve)",
    )
    parser.add_argument(
        "--no-check", action="store_true", help="enqueue task names no live worker or --app knows"
    )
    parser.add_argument("--config", help="TOML settings file (else DUECAST_CONFIG)")
    args = parser.parse_args(rest)
    if (args.task is None) == (args.file is None):
        parser.error("give a TASK or --file, not both")
    settings = load_settings(args.config)
    # Every value is checked before the task name, whose check may read the workers table.
    queue = None if args.file else args.queue
    tasks = partial(known_tasks, settings, args.app, queue, check=not args.no_check)
    if args.file is not None:
        enqueuer = Enqueuer(settings, connect_redis(settings.redis))
        n, merged = enqueue_file(enqueuer, args.file, args.on_duplicate, Console(stderr=True), tasks)
        print(f"enqueued {n - len(merged):,} job(s) from {args.file}" + _merged_lines(args.file, merged))
        return 0
    payload = _json("--payload", args.payload)
    job = Job(
        args.task, payload, args.queue, args.delay, None, args.priority, args.max_attempts, args.unique_key
    )
    encode(job, settings.jobs, None)
    enqueuer = Enqueuer(settings, connect_redis(settings.redis), tasks())
    job_id = enqueuer.enqueue(
        args.task,
        payload,
        queue=args.queue,
        delay_s=args.delay,
        priority=args.priority,
        max_attempts=args.max_attempts,
        unique_key=args.unique_key,
        on_duplicate=args.on_duplicate,
    )
    if job_id.merged:
        print(
            f"merged into job {job_id} ({args.task}), which holds unique key {args.unique_key!r}; "
            "nothing enqueued"
        )
    else:
        print(f"enqueued job {job_id} ({args.task})")
    return 0


def known_tasks(
    settings: Settings, app: str | None, queue: str | None, *, check: bool
) -> frozenset[str] | None:
    """The task names an enqueue may use: those of --app, else of worker.app when set, else those the
    live workers serving `queue` (any queue, for a file) registered. None: not checked. Refuses when
    no live worker can say, rather than let a misspelled task fail max_attempts times."""
    app = app or settings.worker.app
    if app:
        return load_registry(app).task_names
    if not check or (queue is not None and queue not in settings.jobs.queues):
        return None  # unchecked; an unknown queue is the Enqueuer's to refuse
    served = WorkerRegistry(Database(settings.mysql), settings.worker).served_tasks()
    if queue is not None:
        tasks = served.get(f"{JOBS_SOURCE}.{queue}")
        where = f"queue {queue!r}"
    else:
        tasks = frozenset().union(*served.values()) if served else None
        where = "any queue"
    if tasks is None:
        raise EnqueueError(
            f"no live worker serves {where}, so the task name cannot be checked: start a worker, "
            "pass --app module[:attr] to check it against the app, or --no-check"
        )
    return tasks


def _merged_lines(path: Path, merged: dict[int, int]) -> str:
    """`; N merged into active jobs: line L -> job J, ...` (the first few), or nothing."""
    if not merged:
        return ""
    shown = ", ".join(f"line {line} -> job {job}" for line, job in list(merged.items())[:MERGES_SHOWN])
    more = f", and {len(merged) - MERGES_SHOWN:,} more" if len(merged) > MERGES_SHOWN else ""
    return f"; {len(merged):,} merged into active jobs of their task holding their unique key: {shown}{more}"


_JOB_FIELDS = {"task", "payload", "queue", "delay_s", "priority", "max_attempts", "unique_key"}


def _json(what: str, text: str) -> Any:
    """Parse JSON text from the command line or a file; EnqueueError naming `what` if it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EnqueueError(f"{what}: not JSON: {exc}") from exc
    except RecursionError as exc:  # the parser recurses per level: thousands of [ or {
        raise EnqueueError(f"{what}: nested too deeply to parse (a payload may nest 100 levels)") from exc


def read_jobs(path: Path) -> Iterator[tuple[int, Job]]:
    """(line number, Job) for each non-blank line; a bad line raises EnqueueError naming it."""
    number = 0
    try:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                job = _line_job(path, number, line)
                if job is not None:
                    yield number, job
    except UnicodeDecodeError as exc:
        raise EnqueueError(f"{path}:{number + 1}: not UTF-8 text ({exc.reason})") from exc


def _line_job(path: Path, number: int, line: str) -> Job | None:
    if not line.strip():
        return None
    item = _json(f"{path}:{number}", line)
    if not isinstance(item, dict) or "task" not in item:
        raise EnqueueError(f'{path}:{number}: expected an object with a "task"')
    unknown = set(item) - _JOB_FIELDS
    if unknown:
        raise EnqueueError(f"{path}:{number}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        return Job(**item)
    except TypeError as exc:
        raise EnqueueError(f"{path}:{number}: {exc}") from exc


def _check_tasks(path: Path, rows: list[JobRow], numbers: list[int], tasks: frozenset[str] | None) -> None:
    if tasks is None:
        return
    for row, number in zip(rows, numbers, strict=True):
        if row.task not in tasks:
            known = ", ".join(sorted(tasks)) or "none"
            raise EnqueueError(f"{path}:{number}: unknown task {row.task!r}; registered: {known}")


def enqueue_file(
    enqueuer: Enqueuer,
    path: Path,
    on_duplicate: OnDuplicate,
    console: Console,
    known: Callable[[], frozenset[str] | None] = lambda: None,
) -> tuple[int, dict[int, int]]:
    """Validate every line first (nothing written if one is bad), then its task against `known()`
    (None: unchecked), then write all in one transaction. Returns how many lines held a job, and for
    each merged one (`keep`) its line -> the job kept."""
    if not path.is_file():
        raise EnqueueError(f"{path}: no such file")
    rows = []
    numbers = []
    merged: dict[int, int] = {}
    with Progress(console=console, transient=True) as bar:
        check = bar.add_task("validating", total=path.stat().st_size)
        for number, job in read_jobs(path):
            try:
                rows.append(encode(job, enqueuer.jobs, enqueuer.tasks))
                numbers.append(number)
            except EnqueueError as exc:
                raise EnqueueError(f"{path}:{number}: {exc}") from exc
            if number % FILE_CHUNK == 0:
                bar.update(check, completed=min(path.stat().st_size, number * 100))
        bar.update(check, completed=path.stat().st_size)
        _check_tasks(path, rows, numbers, known())
        write = bar.add_task("enqueueing", total=len(rows))
        with enqueuer.db.transaction() as cur:
            for i in range(0, len(rows), FILE_CHUNK):
                written = enqueuer.write(cur, rows[i : i + FILE_CHUNK], on_duplicate)
                merged.update({numbers[i + j]: job for j, job in written.merged.items()})
                bar.advance(write, len(rows[i : i + FILE_CHUNK]))
    enqueuer.wake()
    return len(rows), merged
