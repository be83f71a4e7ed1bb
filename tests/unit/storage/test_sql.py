"""SQL rendering (shared/queries/source.py): only backquoted identifiers and rendered ints ever reach SQL
text."""

from __future__ import annotations

import dataclasses
import enum
import re
from decimal import Decimal

import pytest

from duecast.shared.entries import Entry
from duecast.shared.queries.source import SourceSQL, assignments, column_list, fence, int_list, render
from duecast.shared.settings import SourceSettings
from duecast.shared.states import ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN, DUE_INDEX, STATE_COLUMN, State
from tests.unit.fakes import rescan_source

# Everything that may appear bare in a statement: SQL words, functions, the information_schema
# names of check_schema and derived-table aliases. A new bare word must be added here on purpose.
SQL_WORDS = {
    "SELECT", "FROM", "FORCE", "INDEX", "WHERE", "AND", "OR", "ORDER", "BY", "LIMIT", "FOR",
    "UPDATE", "SKIP", "LOCKED", "SET", "NOW", "INTERVAL", "MICROSECOND", "IN", "DELETE", "COUNT",
    "AS", "MIN", "TIMESTAMPDIFF", "UNION", "ALL", "PRIMARY", "DATABASE",
    "MOD", "FLOOR", "ABS", "TO_SECONDS",  # a re-scan check's slot (shared.queries.pace)
    "information_schema", "COLUMNS", "COLUMN_NAME", "DATA_TYPE", "TABLE_SCHEMA", "TABLE_NAME",
    "due_rows", "heads",
}  # fmt: skip
PLACEHOLDERS = {"{fence}", "{ids}", "{columns}", "{set}"}
STATEMENTS = [f.name for f in dataclasses.fields(SourceSQL) if f.name != "id_column"]

# Names chosen to stand out: any unquoted use of them is easy to spot.
ODD = rescan_source("odd", table="Odd_Table_7", id_column="Odd_Id_7", due_column="Odd_Due_7", period_s=5.0)
ODD_ID = render(ODD).id_column


def _bare_words(sql: str) -> set[str]:
    """Words left once backquoted identifiers, %s, {placeholders} and numbers are taken out."""
    text = re.sub(r"`[A-Za-z0-9_]+`", " ", sql)
    text = text.replace("%s", " ")
    for p in PLACEHOLDERS:
        text = text.replace(p, " ")
    # String literals are not allowed at all: values travel as parameters.
    assert "'" not in text
    assert '"' not in text
    for token in (";", "--", "/*", "#"):
        assert token not in text
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


@pytest.mark.parametrize("name", STATEMENTS)
@pytest.mark.parametrize(
    "src", [ODD, rescan_source(), rescan_source("jobs", due_column="run_at", id_column="id")]
)
def test_statements_use_only_backquoted_identifiers(name: str, src: SourceSettings) -> None:
    sql = getattr(render(src), name)
    assert _bare_words(sql) <= SQL_WORDS, f"{name}: {sql}"
    for ident in {
        src.table,
        src.id_column,
        src.due_column,
        STATE_COLUMN,
        ATTEMPT_COLUMN,
        DISPATCHED_AT_COLUMN,
    }:
        # Each occurrence of a configured or duecast name is backquoted.
        unquoted = re.findall(rf"(?<![`A-Za-z0-9_]){re.escape(ident)}(?![`A-Za-z0-9_])", sql)
        assert unquoted == [], f"{name}: {ident} unquoted in {sql}"


def test_statements_name_the_source_table_and_due_index() -> None:
    sql = render(ODD)
    for name in STATEMENTS:
        if name != "check_schema":
            assert "`Odd_Table_7`" in getattr(sql, name)
    for name in (
        "claim_due",
        "find_expired",
        "find_interrupted",
        "count_due",
        "count_in_flight",
        "oldest_due_age",
    ):
        assert f"FORCE INDEX (`{DUE_INDEX}`)" in getattr(sql, name)
    assert sql.id_column == "`Odd_Id_7`"


def test_state_values_are_the_enum_values() -> None:
    sql = render(ODD)
    assert f"`{STATE_COLUMN}` = {int(State.IDLE)} AND" in sql.claim_due
    assert f"SET `{STATE_COLUMN}` = {int(State.DISPATCHED)}" in sql.mark_dispatched
    assert f"SET `{STATE_COLUMN}` = {int(State.RUNNING)}" in sql.mark_running
    assert f"AND `{STATE_COLUMN}` = {int(State.RUNNING)} ORDER BY" in sql.ack_delete


# The CAS of every fenced statement: (id, attempt, state). A start takes only DISPATCHED rows; every
# finish and renewal only RUNNING ones, so an ack of a requeued (IDLE) row matches nothing.
FENCED_ON = {
    State.DISPATCHED: ("lock_dispatched", "lock_dispatched_skip", "count_dispatched", "mark_running"),
    State.RUNNING: (
        "give_back",
        "lock_leased",
        "extend_lease",
        "leased",
        "lock_running",
        "ack_touch",
        "ack_delete",
        "fail_rescan",
        "fail_oneoff",
    ),
}


@pytest.mark.parametrize("state", list(FENCED_ON))
def test_fenced_statements_always_check_the_state(state: State) -> None:
    sql = render(ODD)
    for name in FENCED_ON[state]:
        stmt = getattr(sql, name)
        assert f"{{fence}} AND `{STATE_COLUMN}` = {int(state)}" in stmt, name


def test_a_straggler_is_fenced_on_its_attempt_in_any_state() -> None:
    assert "WHERE {fence} FOR UPDATE" in render(ODD).lock_attempt


def test_render_refuses_names_that_skipped_validation() -> None:
    """Defence in depth: even a SourceSettings built without validation cannot inject SQL."""
    bad = SourceSettings.model_construct(**{**ODD.model_dump(), "table": "x`; DROP TABLE y; --"})
    with pytest.raises(ValueError, match="not an allowed SQL identifier"):
        render(bad)


def test_format_placeholders_take_rendered_values() -> None:
    sql = render(ODD)
    stmt = sql.ack_delete.format(fence=fence([Entry(3, 2)], sql.id_column))
    assert "{" not in stmt
    assert "}" not in stmt
    assert "IN (3)" in stmt


# --- int_list ---------------------------------------------------------------------------------------


class Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    "values",
    [
        [True],
        [1, False],
        [1.0],
        [1, 2.5],
        ["1"],
        [b"1"],
        [Decimal(1)],
        [None],
        [Color.RED],
        ["1); DROP TABLE x"],
    ],
    ids=repr,
)
def test_int_list_refuses_anything_but_real_ints(values: list[object]) -> None:
    with pytest.raises(TypeError):
        int_list(values)  # type: ignore[arg-type]


def test_int_list_refuses_empty() -> None:
    """`IN ()` is a syntax error at best; refuse before it reaches the server."""
    with pytest.raises(ValueError, match="at least one"):
        int_list([])
    with pytest.raises(ValueError, match="at least one"):
        int_list(iter(()))


def test_int_list_renders() -> None:
    assert int_list([1, 2, 3]) == "1,2,3"
    assert int_list(iter([2**63 - 1])) == "9223372036854775807"
    assert int_list([-1, 0]) == "-1,0"


# --- fence ------------------------------------------------------------------------------------------


def test_fence_groups_ids_by_attempt() -> None:
    where = fence([Entry(5, 2), Entry(1, 1), Entry(7, 2), Entry(3, 9)], ODD_ID)
    assert where == (
        "((`Odd_Id_7` IN (1) AND `dc_attempt` = 1) OR "
        "(`Odd_Id_7` IN (5,7) AND `dc_attempt` = 2) OR "
        "(`Odd_Id_7` IN (3) AND `dc_attempt` = 9))"
    )


def test_fence_of_one_attempt_is_one_range() -> None:
    where = fence((Entry(i, 4) for i in range(1, 6)), ODD_ID)
    assert where == "((`Odd_Id_7` IN (1,2,3,4,5) AND `dc_attempt` = 4))"


def test_fence_text_holds_only_digits_and_identifiers() -> None:
    entries = [Entry(i * 7919 % 1000 + 1, i % 5 + 1) for i in range(200)]
    where = fence(entries, ODD_ID)
    stripped = re.sub(r"`[A-Za-z0-9_]+`", "", where)
    assert re.fullmatch(r"[0-9(),= ]*(?:(?:IN|AND|OR)[0-9(),= ]*)*", stripped)
    # Every (id, attempt) pair is matched by exactly one group, with its own attempt.
    groups = re.findall(r"IN \(([0-9,]+)\) AND `dc_attempt` = ([0-9]+)", where)
    pairs = {(int(i), int(a)) for ids, a in groups for i in ids.split(",")}
    assert pairs == {(e.id, e.attempt) for e in entries}
    assert len({a for _, a in groups}) == len(groups)


def test_fence_refuses_non_int_values() -> None:
    with pytest.raises(TypeError):
        fence([Entry(True, 1)], ODD_ID)  # bool is an int subclass: type-checks, yet must not render
    with pytest.raises(TypeError):
        fence([Entry(1, "1 OR 1=1")], ODD_ID)  # type: ignore[arg-type]


# --- column_list / assignments ----------------------------------------------------------------------


def test_column_list() -> None:
    assert column_list([]) == "*"
    assert column_list(iter(())) == "*"
    assert column_list(["user_id", "dc_attempt", "status"]) == "`user_id`, `dc_attempt`, `status`"


@pytest.mark.parametrize("bad", ["a b", "x`y", "1a", "", "a;b", "*"])
def test_column_list_refuses_bad_names(bad: str) -> None:
    with pytest.raises(ValueError, match="not an allowed SQL identifier"):
        column_list(["ok", bad])


def test_assignments() -> None:
    assert assignments([]) == ""
    assert assignments(["status"]) == ", `status` = %s"
    assert assignments(["a", "b_2"]) == ", `a` = %s, `b_2` = %s"


@pytest.mark.parametrize("bad", ["a = 1, b", "x`y", "1a", ""])
def test_assignments_refuse_bad_names(bad: str) -> None:
    with pytest.raises(ValueError, match="not an allowed SQL identifier"):
        assignments([bad])


def test_ack_touch_placeholders_match_its_parameters() -> None:
    """One %s for the delay plus one per assigned column: what run_ack passes."""
    sql = render(ODD)
    stmt = sql.ack_touch.format(set=assignments(["a", "b"]), fence=fence([Entry(1, 1)], sql.id_column))
    assert stmt.count("%s") == 3
