"""Start-up failures: one line naming the setting or server and what to do, and a documented exit code
(docs/runbook.md#exit-codes). Every command and role runs through `run_command`; only a bug (an error
nobody explained) prints a traceback.
"""

from __future__ import annotations

import logging
import sys
import threading
import tomllib
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import SettingsError

from ..api.app import AppError
from ..api.enqueue import EnqueueError
from ..api.publish import PublishError
from ..errors import DuecastError
from ..fanout.client import redis_problem
from ..settings.model import SettingsFileError
from ..storage.db import mysql_problem
from ..storage.schema import SchemaError
from ..storage.topic_admin import TopicError
from ..storage.units import NotConnected, is_transient, retry_transient

T = TypeVar("T")
_log = logging.getLogger("duecast.startup")

# duecast's own "cannot do that" errors: each message already says what to run or fix.
_REFUSALS = (SchemaError, AppError, EnqueueError, TopicError, PublishError, SettingsFileError)

EXIT_OK = 0
EXIT_NO = 1  # the command ran, and the answer is no: no such job, nothing confirmed
EXIT_CONFIG = 2  # fix the command line, the settings, the app or the schema, then run it again
EXIT_UNAVAILABLE = 3  # MySQL or Redis could not be reached or refused: start it, or retry later
EXIT_UNCONFIRMED = 4  # a destructive action without a terminal to confirm on and without --yes
EXIT_BUG = 70  # an unexpected error (sysexits' EX_SOFTWARE): the traceback is printed; please report it


class StartupError(DuecastError):
    """A failure the operator can fix; `str()` is the one line to print."""

    def __init__(self, line: str, code: int = EXIT_CONFIG) -> None:
        super().__init__(line)
        self.code = code


def explain(exc: BaseException) -> StartupError | None:
    """The one-line account of `exc`, or None when it is not one duecast knows (a bug)."""
    if isinstance(exc, StartupError):
        return exc
    found = mysql_problem(exc) or redis_problem(exc)
    if found is not None:
        line, unavailable = found
        return StartupError(line, EXIT_UNAVAILABLE if unavailable else EXIT_CONFIG)
    if is_transient(exc):
        # A lock held past mysql.lock_wait_s, a deadlock, a lost session: roles retry these (a
        # running loop, or retry_startup); a command that meets one says so in one line.
        return StartupError(f"{transient_cause(exc)}; it passes: run it again", EXIT_UNAVAILABLE)
    problem = _settings_problem(exc)
    if problem is None and isinstance(exc, _REFUSALS):
        problem = _one_line(str(exc))
    return None if problem is None else StartupError(problem)


def _settings_problem(exc: BaseException) -> str | None:
    if isinstance(exc, ValidationError):
        return f"invalid settings: {settings_errors(exc)} (settings file or DUECAST_* environment)"
    if isinstance(exc, SettingsError):
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return _one_line(f"invalid settings: {exc}{cause}")
    if isinstance(exc, tomllib.TOMLDecodeError | FileNotFoundError):
        return _one_line(str(exc))
    return None


def settings_errors(exc: ValidationError) -> str:
    """Every field error on one line: `mysql.port: Input should be ...; sources.0.table: ...`."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else str(err["msg"]))
    return "; ".join(_one_line(p) for p in parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run_command(prog: str, fn: Callable[[list[str]], int], argv: Sequence[str]) -> int:
    """Run `fn(argv)`; a failure duecast can explain is one line on stderr and its exit code."""
    try:
        return fn(list(argv))
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise  # argparse's usage errors and --help: already printed, with their own code
        print(f"{prog}: {_one_line(exc.code)}", file=sys.stderr)
        return EXIT_CONFIG
    except Exception as exc:
        problem = explain(exc)
        if problem is None:
            traceback.print_exc()
            print(
                f"{prog}: unexpected error (a bug: please report it with the traceback above)",
                file=sys.stderr,
            )
            return EXIT_BUG
        print(f"{prog}: {problem}", file=sys.stderr)
        return problem.code


def transient_cause(exc: BaseException) -> str | None:
    """One line for an error a running role simply retries (a server restarting, refusing, a lost
    connection, a deadlock), or None for anything else: an unexpected error, whose traceback matters."""
    found = mysql_problem(exc) or redis_problem(exc)
    if is_transient(exc) or (found is not None and found[1]):
        return f"{type(exc).__name__}: {_one_line(str(exc))}"
    return None


def log_failure(logger: logging.Logger, exc: BaseException, msg: str, *args: object, **extra: Any) -> None:
    """Log a failed step that will be retried, its cause on the line: a transient one, or one the
    operator must fix (credentials revoked under a running role, a grant or ACL command missing), as
    one WARNING (rate-limited per cause by logs.RepeatFilter); anything else as an ERROR with its
    traceback (a bug, or a problem nobody expected)."""
    found = mysql_problem(exc) or redis_problem(exc)
    cause = transient_cause(exc) or (None if found is None else found[0])
    if cause is None:
        said = f"{type(exc).__name__}: {_one_line(str(exc))}"
        logger.error(f"{msg}: %s", *args, said, exc_info=exc, extra={**extra, "cause": said})
    else:
        logger.warning(f"{msg}: %s", *args, cause, extra={**extra, "cause": cause})


# A start-up step's retries are paced like a failing tick's (shared/process/loop.py), capped lower:
# the process is not serving yet, so a lock released a moment ago should not cost it ten seconds.
STARTUP_BASE_S, STARTUP_CAP_S = 0.5, 5.0


def retry_startup(
    unit: Callable[[], T],
    *,
    what: str,
    stop: threading.Event,
    base_s: float = STARTUP_BASE_S,
    cap_s: float = STARTUP_CAP_S,
) -> T:
    """Run a start-up step that uses MySQL (a schema check, range discovery) until it succeeds.

    A transient error (a lock held past mysql.lock_wait_s, a deadlock, a session lost or killed
    mid-statement) is one WARNING line naming the step and the error, then the step runs again
    with capped backoff, for as long as it takes: a step commits nothing it cannot repeat. Any
    other error ends the start at once with its one line (`explain`); so does a server that cannot
    be reached at all (NotConnected: exit code 3, as when the first step finds it down, so a wrong
    mysql.host fails at once and an orchestrator restarts the process). A stop request (SIGTERM)
    ends the wait and the start, in one line.
    """

    def retryable(exc: BaseException) -> bool:
        return is_transient(exc) and not isinstance(exc, NotConnected)

    try:
        return retry_transient(
            unit,
            what=f"start-up: {what}",
            retries=None,
            log=_log,
            base_s=base_s,
            cap_s=cap_s,
            sleep=stop.wait,
            event="startup.retried",
            retry_on=lambda exc: retryable(exc) and not stop.is_set(),
        )
    except Exception as exc:
        if not (stop.is_set() and retryable(exc)):
            raise
        line = f"stopped during start-up while {what} kept failing: {transient_cause(exc)}"
        raise StartupError(line, EXIT_UNAVAILABLE) from exc
