"""How a unit of work runs against MySQL: duecast's own errors, the one savepoint helper, the one
lock-wait fallback and the one transient-retry loop (paced by policy.error_backoff_s).

Code outside the storage layer catches the names defined here, never a driver error.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeAlias, TypeVar

import pymysql
import pymysql.cursors

from ..entries import Entry
from ..errors import DuecastError, TransientFailure
from ..policy import error_backoff_s

T = TypeVar("T")

# What storage classes and their callers pass around, so no caller imports the driver for a type.
Cursor: TypeAlias = pymysql.cursors.Cursor
Connection: TypeAlias = "pymysql.Connection[pymysql.cursors.Cursor]"  # subscriptable for mypy only

DEADLOCK, LOCK_WAIT_TIMEOUT, DUPLICATE_KEY = 1213, 1205, 1062
ROLLED_BACK = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})  # failed, and said so: no outcome left unknown
# The server takes no writes for now (--read-only: 1290; MySQL 8.0's --super-read-only too; 1836,
# ER_READ_ONLY_MODE): a replica during a failover, or maintenance. It passes, but not on the spot.
READ_ONLY = frozenset({1290, 1836})
# The account lacks a privilege (on the database, a table, a column). MySQL says 1142 for a table
# the account may not touch whether or not it exists (so as not to tell), never 1146.
ACCESS_DENIED = frozenset({1044, 1142, 1143})
# After these the whole unit may simply run again: InnoDB rolled the statement or transaction back
# (deadlock, lock wait timeout), or the connection is gone (refused, lost, killed: 1927/4031), and
# with it the transaction. An outcome-unknown COMMIT is among the latter: callers re-read under
# their fence instead of guessing.
# The server's own files and memory failing it for now: the operating system's errors it passes on
# (codes under 1000: a temporary table's file could not be created, read, written or deleted, out of
# memory, disk full, too many open files) and its own for disk and memory. The server's state, not a
# statement's fault: a row's ack hitting one is not that row's refusal.
SERVER_RESOURCES = frozenset({1, 2, 3, 5, 6, 9, 20, 23, 29, 1021, 1037, 1038, 1041})
_TRANSIENT_CODES = {DEADLOCK, LOCK_WAIT_TIMEOUT, 2003, 2006, 2013, 1927, 4031, *SERVER_RESOURCES}


class StorageError(DuecastError):
    """An error of the storage layer that its callers may handle by name."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class TransientError(StorageError, TransientFailure):
    """A unit of work failed for a reason that passes (deadlock, lock wait timeout, lost or refused
    connection, killed session): nothing of it was committed unless its COMMIT was cut off, and
    running the whole unit again is safe because every transition is fenced."""


class CommitUnknown(TransientError):
    """The connection was lost at the COMMIT (killed, the server gone): the unit may or may not have
    committed. A claim's carries the entries it would have returned (`claimed`), so its caller can
    settle them, fenced, as soon as the server answers (dispatcher: release them; none is lost
    waiting for the visibility timeout)."""

    def __init__(self, message: str, code: int | None = None, claimed: Sequence[Entry] = ()) -> None:
        super().__init__(message, code)
        self.claimed: tuple[Entry, ...] = tuple(claimed)


@contextmanager
def claiming(entries: list[Entry]) -> Iterator[None]:
    """Around a claim's transaction: a COMMIT cut off carries `entries` (what the claim made, filled
    in as it goes) as CommitUnknown.claimed."""
    try:
        yield
    except CommitUnknown as exc:
        exc.claimed = tuple(entries)
        raise


class NotConnected(TransientError):
    """No connection could be opened (refused, timed out, cut off during the handshake): the unit
    never started and nothing was sent, so running it again is always safe."""


class ValueRefused(StorageError):
    """The database refused a value (out of range, wrong type, a constraint): the statement did not run."""


class DuplicateKey(ValueRefused):
    """An INSERT or UPDATE met a unique key another row holds."""


DRIVER_ERRORS = (pymysql.err.MySQLError,)
# Errors that mean "this statement's values are wrong", not "the connection or lock is".
VALUE_ERRORS = (pymysql.err.DataError, pymysql.err.IntegrityError, ValueRefused)
# ...and the codes that mean so whatever class the driver gives them: 1916 (an overflow converting
# a value, e.g. NOW(6) + INTERVAL 1e24 MICROSECOND) and 1292/1366 (an incorrect value) arrive as
# OperationalError or InternalError. Callers isolate a refused row whatever it raises (row_batch
# .guarded); this names it right in their log lines and for callers that catch ValueRefused.
VALUE_CODES = frozenset({1264, 1292, 1366, 1406, 1441, 1916})
# Anything MySQL may raise, as the driver's error (inside a unit) or as ours (out of one).
MYSQL_ERRORS = (pymysql.err.MySQLError, StorageError)


# Jitter for retries; one per process: seeding a Random takes os.urandom, too slow for every unit.
_RNG = random.Random()


def is_transient(exc: BaseException) -> bool:
    """Whether running the unit again may succeed (see TransientError)."""
    if isinstance(exc, TransientError):
        return True
    if isinstance(exc, pymysql.err.InterfaceError):
        return True
    if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InternalError):
        return bool(exc.args) and exc.args[0] in _TRANSIENT_CODES
    return isinstance(exc, ConnectionError | BrokenPipeError)


def whole_unit(exc: BaseException) -> bool:
    """Whether `exc` is the server's state, not one statement's fault: transient, or read-only for
    now. A row's statement failing so is not that row's refusal: the whole unit is tried again."""
    return is_transient(exc) or refuses_writes(exc)


def refuses_writes(exc: BaseException) -> bool:
    """Whether `exc` (the driver's or duecast's) says the server is read-only for now (READ_ONLY)."""
    return error_code(exc) in READ_ONLY or getattr(exc, "code", None) in READ_ONLY


def error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def access_denied(exc: BaseException) -> bool:
    """Whether `exc` (the driver's or duecast's) is a missing grant, not a fault of the statement."""
    return error_code(exc) in ACCESS_DENIED or getattr(exc, "code", None) in ACCESS_DENIED


def translate(exc: BaseException) -> BaseException:
    """duecast's error for a driver error (the same object for anything else)."""
    if isinstance(exc, StorageError) or not isinstance(exc, (*DRIVER_ERRORS, ConnectionError)):
        return exc
    code = error_code(exc)
    message = str(exc) or type(exc).__name__  # the driver's "(1213, 'Deadlock found ...')"
    if is_transient(exc):
        return TransientError(message, code)
    if isinstance(exc, pymysql.err.IntegrityError) and code == DUPLICATE_KEY:
        return DuplicateKey(message, code)
    if isinstance(exc, VALUE_ERRORS) or code in VALUE_CODES:
        return ValueRefused(message, code)
    return StorageError(message, code) if isinstance(exc, DRIVER_ERRORS) else exc


def translate_connect(exc: BaseException, where: str) -> BaseException:
    """duecast's error for a driver error raised while opening a connection to `where` (the message
    names it): NotConnected when it may pass (the server is down, restarting, unreachable), else as
    `translate` (access denied...)."""
    mine = translate(exc)
    if not isinstance(mine, StorageError):
        return mine
    kind = NotConnected if type(mine) is TransientError else type(mine)
    return kind(f"{where}: {mine}", mine.code)


@contextmanager
def translated() -> Iterator[None]:
    """Raise duecast's error in place of a driver error from the block."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        mine = translate(exc)
        if mine is exc:
            raise
        raise mine from exc


@contextmanager
def savepoint(cur: Cursor, name: str) -> Iterator[None]:
    """Undo only the block's own statements when it raises, keeping the rest of the transaction.

    A transient error is passed on untouched: the whole transaction is gone, and so is the savepoint.
    A savepoint of the same name replaces the last one, so a loop may reuse one name.
    """
    cur.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException as exc:
        if not is_transient(exc):
            cur.execute(f"ROLLBACK TO SAVEPOINT {name}")
        raise


def rollback_to(cur: Cursor, name: str) -> None:
    """Undo the statements since savepoint `name` (set by `savepoint`), e.g. when a fence found them stale."""
    cur.execute(f"ROLLBACK TO SAVEPOINT {name}")


def lock_or_skip(locking: Callable[[], T], skip_locked: Callable[[], T]) -> T:
    """Run a locking read; if it waits past the session's lock wait (another live session holds some
    of its rows), run `skip_locked` instead (the same read with SKIP LOCKED), taking what is free.

    Only the timed-out statement was rolled back, so the transaction goes on. Waiting first, rather
    than skipping at once, lets a row whose holder is just committing be taken on this pass.
    """
    try:
        return locking()
    except pymysql.err.OperationalError as exc:
        if error_code(exc) != LOCK_WAIT_TIMEOUT:
            raise
        return skip_locked()


def retry_transient(
    unit: Callable[[], T],
    *,
    what: str,
    redo: str = "",
    retries: int | None,
    log: logging.Logger,
    rng: random.Random | None = None,
    base_s: float = 0.05,
    cap_s: float = 2.0,
    sleep: Callable[[float], object] = time.sleep,
    event: str | None = None,
    retry_on: Callable[[BaseException], bool] = is_transient,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run `unit` again after a transient error (or whatever `retry_on` accepts), up to `retries`
    more times, with jittered exponential backoff; anything else, or the last failure, is raised.
    The log line reads "<what> hit <error>; retrying <redo> (1 of 3) in 0.05s". `retries=None`
    retries for as long as `retry_on` accepts the error ("(retry 7)"): start-up steps, whose
    `retry_on` turns false when the process is asked to stop.

    With `budget_s` the limit is a time instead: retries go on while the next one would start within
    `budget_s` of the first attempt (a server restart takes tens of seconds, not 3 quick tries), and
    the log line reads "(retry 4, 2.9s of 30s) in 0.80s".

    Safe only for units whose transitions are fenced, so that running one again after a COMMIT that
    did land (outcome unknown) changes nothing: the re-read decides, not a guess.
    """
    rng = rng or _RNG
    began = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return unit()
        except Exception as exc:
            if not retry_on(exc):
                raise
            delay = error_backoff_s(attempt, base_s, cap_s, rng)
            spent_s = clock() - began if budget_s is not None else 0.0  # the clock only paces a budget
            count = _retry_count(attempt, retries, budget_s, spent_s, delay)
            if count is None:
                raise
            log.warning(
                "%s hit %s; retrying %s(%s) in %.2fs",
                what,
                translate(exc),
                f"{redo} " if redo else "",
                count,
                delay,
                extra={"event": event} if event else None,
            )
            sleep(delay)


def _retry_count(
    attempt: int, retries: int | None, budget_s: float | None, spent_s: float, delay_s: float
) -> str | None:
    """How the retry log line counts this retry ("2 of 3", "retry 7", "retry 4, 2.9s of 30s"), or None
    when the limit (a count, or a time budget the next try would pass) says to give up."""
    if budget_s is not None:
        return None if spent_s + delay_s > budget_s else f"retry {attempt}, {spent_s:.1f}s of {budget_s:g}s"
    if retries is None:
        return f"retry {attempt}"
    return None if attempt > retries else f"{attempt} of {retries}"
