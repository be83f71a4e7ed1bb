"""`duecast enqueue`: one job from the command line, or every job of a JSON Lines file in one transaction.

Parsing, checking and printing only; every statement runs in shared.api.enqueue.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from ..shared.api.app import load_registry
from ..shared.api.enqueue import EnqueueError, Enqueuer, Job, JobRow, OnDuplicate, Written, encode
from ..shared.api.job_input import check_count
from ..shared.fanout.client import connect_redis
from ..shared.process import arguments
from ..shared.settings import JOBS_SOURCE, Settings, load_settings
from ..shared.storage.db import Database
from ..shared.storage.units import StorageError, access_denied
from ..shared.storage.worker_registry import WorkerRegistry
from .formats import plain

FILE_CHUNK = 5000  # rows validated / written per progress step
MERGES_SHOWN = 5  # merged lines named in `duecast enqueue --file`'s summary


def enqueue_main(rest: list[str]) -> int:
    parser = _parser()
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
    return _enqueue_one(args, settings, tasks)


def _parser() -> argparse.ArgumentParser:
    parser = arguments.parser(
        prog="duecast enqueue",
        description="Enqueue one job, or every job of a JSON Lines file in one transaction.",
    )
    parser.add_argument("task", nargs="?", help="task name (not with --file)")
    parser.add_argument("--payload", default="null", help="the job's JSON payload")
    parser.add_argument("--queue", default="default", help="the queue (one of jobs.queues)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds until it is due")
    parser.add_argument("--priority", type=int, default=0, help="0-9, 0 runs first")
    parser.add_argument(
        "--max-attempts", type=int, help="failed runs before it is dead (default: jobs.max_attempts)"
    )
    parser.add_argument("--unique-key", help="at most one active job holds this key (see --on-duplicate)")
    parser.add_argument(
        "--concurrency-key",
        help="what the job runs for (an account, a tenant): see [jobs.key_limits] in docs/protecting.md",
    )
    parser.add_argument(
        "--on-duplicate",
        choices=["error", "keep"],
        default="error",
        help="when an active job holds --unique-key: fail, or keep that job and enqueue nothing",
    )
    parser.add_argument(
        "--file",
        type=Path,
        help='JSON Lines, one job per line: {"task": ..., "payload": ..., "queue": ..., "delay_s": ..., '
        '"priority": ..., "max_attempts": ..., "unique_key": ..., "concurrency_key": ...}; all are enqueued '
        "or none",
    )
    parser.add_argument(
        "--app",
        help="module[:attr] of the task Registry to check task names against (default: worker.app, "
        "else the tasks the queue's live workers serve)",
    )
    parser.add_argument(
        "--no-check", action="store_true", help="enqueue task names no live worker or --app knows"
    )
    return parser


def _enqueue_one(
    args: argparse.Namespace, settings: Settings, tasks: Callable[[], frozenset[str] | None]
) -> int:
    """`duecast enqueue TASK`: check the job's values, then its task name, then enqueue it."""
    payload = _json("--payload", args.payload)
    job = Job(
        args.task,
        payload,
        args.queue,
        args.delay,
        None,
        args.priority,
        args.max_attempts,
        args.unique_key,
        concurrency_key=args.concurrency_key,
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
        concurrency_key=args.concurrency_key,
    )
    if job_id.merged:
        print(
            plain(f"merged into job {job_id} ({args.task}), which holds unique key {args.unique_key!r}; ")
            + "nothing enqueued"
        )
    else:
        print(plain(f"enqueued job {job_id} ({args.task})"))
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
    try:
        served = WorkerRegistry(Database(settings.mysql), settings.worker).served_tasks()
    except StorageError as exc:
        if not access_denied(exc):
            raise
        # The enqueuer account of sql/grants.sql reads no table (a SELECT grant would let it lock
        # rows): the check is skipped, said in one line; --app or worker.app checks without the database.
        print(
            f"duecast enqueue: warning: task names not checked: mysql.user {settings.mysql.user!r} may not "
            f"read {settings.worker.registry_table} (access denied); pass --app module[:attr] or set "
            "worker.app to check them",
            file=sys.stderr,
        )
        return None
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


_JOB_FIELDS = {
    "task",
    "payload",
    "queue",
    "delay_s",
    "priority",
    "max_attempts",
    "unique_key",
    "concurrency_key",
}


class _DuplicateKey(EnqueueError):
    """A JSON object holding one key twice (the key is its argument); reported with its place."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: `{"task": "a", "task": "b"}` is a mistake, not
    the last one winning."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _json(what: str, text: str) -> Any:
    """Parse JSON text from the command line or a file; EnqueueError naming `what` if it is not,
    or if an object in it holds one key twice."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise EnqueueError(f"{what}: the key {exc.args[0]!r} appears twice in one object") from exc
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
    rows: list[JobRow] = []
    numbers = []
    merged: dict[int, int] = {}
    with Progress(console=console, transient=True) as bar:
        check = bar.add_task("validating", total=path.stat().st_size)
        for number, job in read_jobs(path):
            try:
                check_count(len(rows) + 1, "a file", "split it into several files")
                rows.append(encode(job, enqueuer.jobs, enqueuer.tasks))
                numbers.append(number)
            except EnqueueError as exc:
                raise EnqueueError(f"{path}:{number}: {exc}") from exc
            if number % FILE_CHUNK == 0:
                bar.update(check, completed=min(path.stat().st_size, number * 100))
        bar.update(check, completed=path.stat().st_size)
        _check_tasks(path, rows, numbers, known())
        write = bar.add_task("enqueueing", total=len(rows))

        def done(i: int, written: Written) -> None:
            merged.update({numbers[i + j]: job for j, job in written.merged.items()})
            bar.advance(write, len(rows[i : i + FILE_CHUNK]))

        enqueuer.insert_in_chunks(rows, on_duplicate, FILE_CHUNK, done)
    enqueuer.wake()
    return len(rows), merged
