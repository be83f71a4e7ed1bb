"""Joining the caller's transaction, whatever holds it (a PyMySQL or mysqlclient connection or cursor, a
SQLAlchemy Connection or Session, a Django connection), found by duck typing: no framework is imported.
Never commits or rolls back a transaction it did not open; the driver's errors come out as duecast's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, cast

import pymysql

from ..errors import DuecastError
from .units import Cursor, translate

Wake = Callable[[], None]
_DRIVERS = ("pymysql", "MySQLdb")  # the DB-API modules whose connections duecast can write on
_DJANGO = ("ensure_connection", "in_atomic_block", "on_commit")  # a Django DatabaseWrapper's
_WAKES = "duecast.wakes"  # key of a SQLAlchemy Session's / Connection's `info`: wake-ups owed at its commit


class UnknownConnection(DuecastError, TypeError):
    """`conn=` is not something duecast can join; nothing was written."""


@dataclass(frozen=True)
class Caller:
    """A caller's handle, resolved: the DB-API connection under it, and how to run something after
    its transaction commits (None: no framework to ask; the dispatcher's own look finds the work)."""

    raw: Any
    after_commit: Callable[[Wake], None] | None


@contextmanager
def joined(handle: object, wake: Wake) -> Iterator[Cursor]:
    """A cursor in the caller's open transaction: nothing is committed here, and `wake` runs after
    their COMMIT where the framework says when (Django's on_commit, SQLAlchemy's commit events).

    A connection in autocommit mode (Django outside `atomic()`, `autocommit=True`) holds no
    transaction of the caller's: the writes then run in one of our own on it, committed here (rolled
    back on error) and followed by `wake`, so a batch is still all or nothing.
    """
    caller = resolve(handle)
    own = _autocommit(caller.raw)
    with _errors():
        cur = caller.raw.cursor()
    try:
        if own:
            with _errors():
                cur.execute("START TRANSACTION")
        yield cast(Cursor, _CallerCursor(cur))
        if own:
            with _errors():
                caller.raw.commit()
    except BaseException:
        if own:
            with suppress(Exception):  # the connection is gone, and our transaction with it
                caller.raw.rollback()
        raise
    finally:
        with suppress(Exception):
            cur.close()
    if own:
        wake()
    elif caller.after_commit is not None:
        caller.after_commit(wake)


def resolve(handle: object) -> Caller:
    """The DB-API connection under `handle`, and its framework's on-commit hook if it has one."""
    db = getattr(handle, "db", None)
    if _is_django(db):  # a Django cursor (CursorWrapper): its connection
        handle = db
    if _is_django(handle):
        django = cast(Any, handle)
        django.ensure_connection()
        hook = (lambda wake: _on_django_commit(django, wake)) if django.in_atomic_block else None
        return Caller(_driver_connection(django.connection, handle), hook)
    if _is_sqlalchemy_session(handle):
        session = cast(Any, handle)
        return Caller(
            _driver_connection(session.connection().connection.dbapi_connection, handle),
            lambda wake: _wake_at_commit(session, "after_commit", ("after_rollback",), wake),
        )
    if _is_sqlalchemy_connection(handle):
        sa = cast(Any, handle)
        if not sa.in_transaction():
            sa.begin()  # what SQLAlchemy's autobegin does at a first execute: the caller commits it
        return Caller(
            _driver_connection(sa.connection.dbapi_connection, handle),
            lambda wake: _wake_at_commit(sa, "commit", ("rollback",), wake),
        )
    if _is_driver(handle) and hasattr(handle, "commit"):
        return Caller(handle, None)
    if _is_driver(handle) and hasattr(handle, "execute"):  # a cursor: its connection
        return Caller(_driver_connection(getattr(handle, "connection", None), handle), None)
    raise _unknown(handle)


def _on_django_commit(django: Any, wake: Wake) -> None:
    """`wake` at the commit of the outermost atomic(), once however many writes the block makes: a
    callback already pending (`run_on_commit` holds (savepoint ids, callback, robust) since Django 4.2,
    and dropped a rolled-back savepoint's) is not added again."""
    if not any(entry[1] == wake for entry in getattr(django, "run_on_commit", ())):
        django.on_commit(wake)


def _wake_at_commit(holder: Any, commit: str, rollbacks: tuple[str, ...], wake: Wake) -> None:
    """Owe `wake` at `holder`'s next commit event (a SQLAlchemy Session's `after_commit`; a Connection's
    `commit`, which comes just before its COMMIT: a dispatcher that looks first finds the job at its
    next poll). One listener per holder, whatever the number of writes; a rollback forgets the debt."""
    event = sys.modules["sqlalchemy"].event  # loaded: the caller handed us one of its objects
    owed: list[Wake] = holder.info.setdefault(_WAKES, [])
    if wake not in owed:
        owed.append(wake)
    if not event.contains(holder, commit, _pay):
        event.listen(holder, commit, _pay)
        for name in rollbacks:
            event.listen(holder, name, _forget)


def _pay(holder: Any, *_: object) -> None:
    for wake in holder.info.pop(_WAKES, ()):
        wake()


def _forget(holder: Any, *_: object) -> None:
    holder.info.pop(_WAKES, None)


def _is_django(obj: object) -> bool:
    return obj is not None and all(hasattr(obj, a) for a in _DJANGO)


def _is_sqlalchemy_session(obj: object) -> bool:
    return (
        _module(obj).startswith("sqlalchemy.")
        and callable(getattr(obj, "connection", None))
        and hasattr(obj, "get_bind")
    )


def _is_sqlalchemy_connection(obj: object) -> bool:
    sqlalchemy = _module(obj).startswith("sqlalchemy.")
    return sqlalchemy and hasattr(obj, "in_transaction") and hasattr(obj, "engine")


def _is_driver(obj: object) -> bool:
    """One of the drivers' own objects, or of a subclass (duecast's own connections are)."""
    return any((cls.__module__ or "").split(".")[0] in _DRIVERS for cls in type(obj).__mro__)


def _module(obj: object) -> str:
    return type(obj).__module__ or ""


def _driver_connection(raw: object, handle: object) -> object:
    if not (_is_driver(raw) and hasattr(raw, "commit")):
        raise _unknown(handle, f" (its driver connection is a {type(raw).__module__}.{type(raw).__name__})")
    return raw


def _unknown(handle: object, why: str = "") -> UnknownConnection:
    return UnknownConnection(
        f"conn= takes a PyMySQL or mysqlclient (MySQLdb) connection or cursor, a SQLAlchemy Connection or "
        f"Session, or a Django connection, not a {type(handle).__module__}.{type(handle).__name__}{why}"
    )


def _autocommit(raw: Any) -> bool:
    with _errors():
        return bool(raw.get_autocommit())


class _CallerCursor:
    """The caller's driver cursor, raising duecast's errors (DuplicateKey, TransientError...), which
    the writers catch by name whichever driver is underneath."""

    def __init__(self, cur: Any) -> None:
        self._cur = cur

    def execute(self, query: str, args: object = None) -> int:
        with _errors():
            return int(self._cur.execute(query, args) or 0)

    def fetchone(self) -> Any:
        with _errors():
            return self._cur.fetchone()

    def fetchall(self) -> Any:
        with _errors():
            return self._cur.fetchall()

    @property
    def lastrowid(self) -> int:
        return int(self._cur.lastrowid or 0)

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)


@contextmanager
def _errors() -> Iterator[None]:
    """duecast's error for either driver's: mysqlclient's classes are PyMySQL's by name (both follow
    DB-API), so one mapping (units.translate) serves both."""
    try:
        yield
    except Exception as exc:
        mine = translate(_as_pymysql(exc))
        if mine is exc or not isinstance(mine, DuecastError):
            raise
        raise mine from exc


_DBAPI_NAMES = (
    "IntegrityError",
    "DataError",
    "OperationalError",
    "InterfaceError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "DatabaseError",
    "MySQLError",
    "Error",
)


def _as_pymysql(exc: BaseException) -> BaseException:
    """PyMySQL's error of the same DB-API class and args for a mysqlclient error; others as they are."""
    if not _module(exc).startswith("MySQLdb"):
        return exc
    names = {cls.__name__ for cls in type(exc).__mro__}
    name = next((n for n in _DBAPI_NAMES if n in names), "MySQLError")
    return cast(BaseException, getattr(pymysql.err, name)(*exc.args))
