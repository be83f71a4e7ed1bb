"""The `duecast` console script: one subcommand per role or operator task.

Each subcommand builds settings in its own `main()`; nothing is configured at import time.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from importlib import metadata

from ..shared.process import arguments, collector
from ..shared.process.failures import EXIT_CONFIG, EXIT_OK, run_command
from ..shared.settings import load_settings
from ..shared.storage.admin import migrate


def _cmd_dispatcher(rest: list[str]) -> int:
    collector.pause()  # while the role imports; start_process resumes it (shared/process/collector.py)
    try:
        from ..dispatcher.main import main  # noqa: PLC0415 - load a role only when it is asked for

        return main(rest)
    finally:
        collector.release()  # a start that ended before start_process: on again, nothing frozen


def _cmd_worker(rest: list[str]) -> int:
    collector.pause()  # as _cmd_dispatcher
    try:
        from ..worker.main import main  # noqa: PLC0415

        return main(rest)
    finally:
        collector.release()


def _cmd_demo(rest: list[str]) -> int:
    from .demo.run import main  # noqa: PLC0415

    return main(rest)


def _cmd_sweeper(rest: list[str]) -> int:
    from ..dispatcher.main import sweeper_main  # noqa: PLC0415

    return sweeper_main(rest)


def _cmd_migrate(rest: list[str]) -> int:
    parser = arguments.parser(
        prog="duecast migrate",
        description="Create the jobs table and add dispatch columns + index to each configured source.",
    )
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


def _cmd_pause(rest: list[str]) -> int:
    from .pause import main  # noqa: PLC0415

    return main(rest)


def _cmd_resume(rest: list[str]) -> int:
    from .pause import main  # noqa: PLC0415

    return main(rest, resume=True)


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
    "pause": (_cmd_pause, "pause a source, job queue, consumer group or task (none: list what is paused)"),
    "resume": (_cmd_resume, "resume what `duecast pause` paused, from where it was"),
    "status": (_cmd_status, "show backlog, lag, freshness, queues and rates (--watch to refresh)"),
    "web": (_cmd_web, "serve the web dashboard (charts, sources, queues, workers, dead jobs, schedules)"),
    "demo": (_cmd_demo, "run the user_block_status re-scan demo with a live display"),
}


def usage() -> str:
    lines = ["usage: duecast COMMAND [options]   (duecast COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join([*lines, "", "  --version   print duecast's version and exit"])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    first = args[0] if args else None
    if first in {"-h", "--help"}:
        print(usage())
        return EXIT_OK
    if first in {"-V", "--version"}:
        print(f"duecast {version()}")
        return EXIT_OK
    if first is None:
        print(usage(), file=sys.stderr)
        return EXIT_CONFIG
    if first not in COMMANDS:
        near = difflib.get_close_matches(first, COMMANDS, n=1)
        hint = f"did you mean `duecast {near[0]}`? " if near else ""
        what = "option" if first.startswith("-") else "command"
        print(f"duecast: unknown {what} {first!r}; {hint}see `duecast --help`", file=sys.stderr)
        return EXIT_CONFIG
    # A failure duecast can explain is one line and an exit code (docs/runbook.md#exit-codes).
    return run_command(f"duecast {first}", COMMANDS[first][0], args[1:])


def version() -> str:
    """The installed distribution's version (a checkout run without installing: unknown)."""
    try:
        return metadata.version("duecast")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"
