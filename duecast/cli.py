"""The `duecast` console script: one subcommand per role or operator task.

Each subcommand builds settings in its own `main()`; nothing is configured at import time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.table import Table

from shared import migrate
from shared.handlers import AppError, load_registry
from shared.jobs import EnqueueError, Enqueuer
from shared.queue import connect_redis
from shared.runtime import build_queue, build_stores
from shared.schema import SchemaError
from shared.settings import Settings, load_settings
from shared.status import snapshot
from shared.store import STATUS_COUNT_CAP


def _cmd_dispatcher(rest: list[str]) -> int:
    from dispatcher.main import main  # noqa: PLC0415 - load a role only when it is asked for

    return main(rest)


def _cmd_worker(rest: list[str]) -> int:
    from worker.main import main  # noqa: PLC0415

    return main(rest)


def _cmd_demo(rest: list[str]) -> int:
    from duecast.demo import main  # noqa: PLC0415

    return main(rest)


def _cmd_sweeper(rest: list[str]) -> int:
    from dispatcher.main import sweeper_main  # noqa: PLC0415

    return sweeper_main(rest)


def _cmd_migrate(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="duecast migrate",
        description="Create the jobs table and add dispatch columns + index to each configured source.",
    )
    parser.add_argument("--config")
    parser.add_argument("--print", dest="dry_run", action="store_true", help="print the SQL, change nothing")
    args = parser.parse_args(rest)
    settings = load_settings(args.config)
    if args.dry_run:
        steps = migrate.plan(settings)
        print(";\n\n".join(steps) + (";" if steps else "-- up to date"))
        return 0
    steps = migrate.apply(settings, on_step=lambda s: print(f"applying: {s.splitlines()[0]} ..."))
    print(f"migrate: {len(steps)} step(s) applied" if steps else "migrate: up to date")
    return 0


def _cmd_enqueue(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="duecast enqueue", description="Enqueue one job.")
    parser.add_argument("task")
    parser.add_argument("--payload", default="null", help="the job's JSON payload (default null)")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds until it is due")
    parser.add_argument("--app", help="module[:attr] of the task Registry: refuse unknown task names")
    parser.add_argument("--config")
    args = parser.parse_args(rest)
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise EnqueueError(f"--payload is not JSON: {exc}") from exc
    settings = load_settings(args.config)
    tasks = load_registry(args.app).task_names if args.app else None
    enqueuer = Enqueuer(settings, connect_redis(settings.redis), tasks)
    job_id = enqueuer.enqueue(args.task, payload, queue=args.queue, delay_s=args.delay)
    print(f"enqueued job {job_id} ({args.task})")
    return 0


def _cmd_status(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="duecast status", description="Show every source's state.")
    parser.add_argument("--config")
    args = parser.parse_args(rest)
    settings = load_settings(args.config)
    Console().print(status_table(settings))
    return 0


def status_table(settings: Settings) -> Table:
    snaps = snapshot(build_stores(settings, settings.all_sources()), build_queue(settings))
    table = Table(title="duecast status")
    for col in (
        "source",
        "due",
        "in flight",
        "in Redis",
        "oldest due age",
        "acked",
        "stale",
        "bad",
        "requeued",
    ):
        table.add_column(col, justify="left" if col == "source" else "right")
    for s in snaps:
        age = "-" if s.db.oldest_due_age_s is None else f"{max(s.db.oldest_due_age_s, 0.0):.1f}s"
        c = s.counters
        table.add_row(
            s.name,
            f"{s.db.due:,}+" if s.db.due >= STATUS_COUNT_CAP else f"{s.db.due:,}",
            f"{s.db.in_flight:,}",
            f"{s.list_length:,}",
            age,
            f"{c.get('acked', 0):,}",
            f"{c.get('stale_entries', 0) + c.get('stale_acks', 0):,}",
            f"{c.get('bad', 0):,}",
            f"{c.get('requeued', 0):,}",
        )
    return table


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "dispatcher": (_cmd_dispatcher, "claim due rows and push them to Redis (hosts the sweeper)"),
    "worker": (_cmd_worker, "pop entries, run handlers, ack in MySQL"),
    "sweeper": (_cmd_sweeper, "requeue rows dispatched but never acked (if not in the dispatcher)"),
    "migrate": (_cmd_migrate, "create/alter tables so sources can be dispatched"),
    "enqueue": (_cmd_enqueue, "enqueue one job (JSON payload) into duecast's jobs table"),
    "status": (_cmd_status, "show due backlog, in flight, staleness and counters per source"),
    "demo": (_cmd_demo, "run the user_block_status re-scan demo with a live display"),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"} or args[0] not in COMMANDS:
        print("usage: duecast COMMAND [options]\n\ncommands:")
        for name, (_, help_) in COMMANDS.items():
            print(f"  {name:<11} {help_}")
        return 0 if args and args[0] in {"-h", "--help"} else 2
    try:
        return COMMANDS[args[0]][0](args[1:])
    except (ValidationError, SettingsError) as exc:
        print(f"duecast: invalid settings:\n{exc}", file=sys.stderr)
    except (SchemaError, FileNotFoundError, EnqueueError, AppError) as exc:
        print(f"duecast: {exc}", file=sys.stderr)
    return 2
