"""The `duecast` console script: one subcommand per role or operator task.

Each subcommand builds settings in its own `main()`; nothing is configured at import time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..shared.process.failures import run_command
from ..shared.settings import load_settings
from ..shared.storage.admin import migrate


def _cmd_dispatcher(rest: list[str]) -> int:
    from ..dispatcher.main import main  # noqa: PLC0415 - load a role only when it is asked for

    return main(rest)


def _cmd_worker(rest: list[str]) -> int:
    from ..worker.main import main  # noqa: PLC0415

    return main(rest)


def _cmd_demo(rest: list[str]) -> int:
    from .demo.run import main  # noqa: PLC0415

    return main(rest)


def _cmd_sweeper(rest: list[str]) -> int:
    from ..dispatcher.main import sweeper_main  # noqa: PLC0415

    return sweeper_main(rest)


def _cmd_migrate(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="duecast migrate",
        description="Create the jobs table and add dispatch columns + index to each configured source.",
    )
    parser.add_argument("--config", help="TOML settings file (else DUECAST_CONFIG)")
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
    from .enqueue import enqueue_main  # noqa: PLC0415

    return enqueue_main(rest)


def _cmd_jobs(rest: list[str]) -> int:
    from .jobs import main  # noqa: PLC0415

    return main(rest)


def _cmd_topics(rest: list[str]) -> int:
    from .topics import main  # noqa: PLC0415

    return main(rest)


def _cmd_status(rest: list[str]) -> int:
    from .status import main  # noqa: PLC0415

    return main(rest)


def _cmd_web(rest: list[str]) -> int:
    from .web.serve import main  # noqa: PLC0415 - Flask loads only for the dashboard

    return main(rest)


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "dispatcher": (_cmd_dispatcher, "claim due rows and push them to Redis (hosts the sweeper)"),
    "worker": (_cmd_worker, "pop entries, run handlers, ack in MySQL"),
    "sweeper": (_cmd_sweeper, "requeue rows dispatched but never acked (if not in the dispatcher)"),
    "migrate": (_cmd_migrate, "create/alter tables so sources can be dispatched"),
    "enqueue": (_cmd_enqueue, "enqueue one job, or a JSON Lines file of jobs, into the jobs table"),
    "jobs": (_cmd_jobs, "show, list, retry, replay or discard one-off jobs"),
    "topics": (_cmd_topics, "publish, status, show/trace, find by key, replay (reset) and volume of topics"),
    "status": (_cmd_status, "show backlog, lag, freshness, queues and rates (--watch to refresh)"),
    "web": (_cmd_web, "serve the web dashboard (charts, sources, queues, workers, dead jobs, schedules)"),
    "demo": (_cmd_demo, "run the user_block_status re-scan demo with a live display"),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"} or args[0] not in COMMANDS:
        print("usage: duecast COMMAND [options]\n\ncommands:")
        for name, (_, help_) in COMMANDS.items():
            print(f"  {name:<11} {help_}")
        return 0 if args and args[0] in {"-h", "--help"} else 2
    # A failure duecast can explain is one line and an exit code (docs/runbook.md#exit-codes).
    return run_command(f"duecast {args[0]}", COMMANDS[args[0]][0], args[1:])
