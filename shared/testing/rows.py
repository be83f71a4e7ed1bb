"""`duecast.testing.call_row` / `call_batch`: a re-scan source's handler called on rows as the worker
calls it, with no server: only the columns it names (and the id), plain or async under the source's
time limit, and its Ack checked by the store's own rules (storage.source_store.group_key).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..acks import Ack, Row
from ..api.handlers import Handler, Registry
from ..api.outcomes import InvalidAck
from ..limits import shown
from ..settings import MySQLSettings, SourceSettings
from ..states import ATTEMPT_COLUMN
from ..storage.db import Database
from ..storage.source_store import SourceStore
from .calls import Outcome, TestingError, as_outcome, on_thread, run_coroutine


def call_row(registry: Registry, source: str, row: Row, **options: Any) -> Ack:
    """The Ack the source's row handler returns for `row`, checked as the worker checks it. What the
    handler raises is raised here (TimedOut past its time limit); an Ack the worker would refuse
    raises InvalidAck with the worker's reason. Options: see `call_batch`."""
    handler, src, columns = _setup(registry, source, options)
    if handler.batch:
        raise TestingError(f"source {source!r} has a batch handler: use duecast.testing.call_batch")
    outcome = _checked(_one(handler, src, _read(handler, src, row)), src, columns or frozenset(row))
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def call_batch(
    registry: Registry, source: str, rows: Sequence[Row], **options: Any
) -> list[Ack | BaseException]:
    """Each row's outcome from the source's handler (row or batch), as the worker gets them: an Ack
    it accepts, or the failure (the exception raised, TimedOut, InvalidAck). Options:
    `settings=` a SourceSettings (else one is made from the keywords below), `id_column` ("id"),
    `due_column` ("updated_time"), `mode` ("rows"), `timeout_s` (30), `table_columns` (the table's
    columns, for the Ack.touch(...) check; default: the keys of the rows given)."""
    handler, src, columns = _setup(registry, source, options)
    read = [_read(handler, src, row) for row in rows]
    table = columns or frozenset(k for row in rows for k in row)
    if not handler.batch:
        return [_checked(_one(handler, src, row), src, table) for row in read]
    if handler.fn is not None:
        plain = handler.run
        outcomes = on_thread(lambda: plain(read), src.timeout_s, src.name)
    else:
        outcomes = run_coroutine(lambda: handler.run_batch(read), src.timeout_s, src.name)
    if isinstance(outcomes, BaseException):  # the call ran past its time limit: every row failed
        return [outcomes] * len(rows)
    return [_checked(o, src, table) for o in outcomes]


def _one(handler: Handler, src: SourceSettings, row: Row) -> Outcome:
    """A row handler's call on one row, plain on a thread or async on a loop, under the time limit."""
    if handler.fn is not None:
        plain = handler.run
        return on_thread(lambda: plain([row])[0], src.timeout_s, src.name)
    return run_coroutine(lambda: handler.run_one(row), src.timeout_s, src.name)


def _setup(
    registry: Registry, source: str, options: dict[str, Any]
) -> tuple[Handler, SourceSettings, frozenset[str]]:
    try:
        handler = registry.handler(source)
    except KeyError:
        raise TestingError(f"the Registry has no handler for source {source!r}") from None
    columns = frozenset(options.pop("table_columns", ()) or ())
    src = options.pop("settings", None)
    if src is None:
        fields = {"table": source, "due_column": "updated_time", "period_s": 10.0, **options}
        src = SourceSettings(name=source, **fields)
    elif options:
        raise TestingError(f"give settings= or keywords, not both ({', '.join(sorted(options))})")
    return handler, src, columns


def _read(handler: Handler, src: SourceSettings, row: Row) -> Row:
    """The row as the worker reads it: the id (and attempt, in rows mode) and the columns the
    handler names, or every column when it names none."""
    if src.id_column not in row:
        raise TestingError(f"the row has no {src.id_column!r} (the id column of source {src.name})")
    missing = [c for c in handler.columns if c not in row]
    if missing:
        raise TestingError(
            f"the handler of {src.name} names columns {missing} the row does not have (a worker "
            "would stop at start-up, naming them)"
        )
    attempt = {ATTEMPT_COLUMN: row.get(ATTEMPT_COLUMN, 1)} if src.mode == "rows" else {}
    if not handler.columns:
        return {**row, **attempt}
    return {src.id_column: row[src.id_column], **attempt, **{c: row[c] for c in handler.columns}}


def _checked(value: Any, src: SourceSettings, table: Iterable[str]) -> Outcome:
    outcome = as_outcome(value)
    if isinstance(outcome, BaseException):
        return outcome
    store = SourceStore(Database(MySQLSettings()), src)  # never connects: its checks only
    store.columns = frozenset(table)
    try:
        store.group_key(outcome)
    except ValueError as exc:  # as the worker's acker makes it (worker/acker.py)
        return InvalidAck(f"{exc}; the ack was {shown(outcome)}")
    return outcome
