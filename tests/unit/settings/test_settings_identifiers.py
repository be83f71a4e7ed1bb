"""SQL-carrying table, column and database names refused, plain ones accepted; reserved source names."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from duecast.shared.settings import (
    JOBS_SOURCE,
    JobsSettings,
    MySQLSettings,
    Settings,
    load_settings,
)
from tests.unit.settings.settings_support import USERS, _source

# --- identifiers ------------------------------------------------------------------------------------

BAD_IDENTIFIERS = [
    "jobs; DROP TABLE x",
    "users`; DROP TABLE x; --",
    "`users`",
    "a" * 65,
    "1users",
    "9",
    "",
    "users table",
    "users-table",
    "db.users",
    "users\n",
    "usérs",
    "users\x00",
]
GOOD_IDENTIFIERS = ["users", "_x", "A" * 64, "t_1", "UserBlockStatus"]


@pytest.mark.parametrize("name", BAD_IDENTIFIERS, ids=repr)
@pytest.mark.parametrize("field", ["table", "id_column", "due_column"])
def test_source_identifiers_carrying_sql_are_rejected(field: str, name: str) -> None:
    with pytest.raises(ValidationError, match="not an allowed SQL identifier"):
        _source(**{field: name})


@pytest.mark.parametrize("name", BAD_IDENTIFIERS, ids=repr)
def test_jobs_table_and_database_identifiers_are_rejected(name: str) -> None:
    with pytest.raises(ValidationError, match="not an allowed SQL identifier"):
        JobsSettings(table=name)
    with pytest.raises(ValidationError, match="not an allowed SQL identifier"):
        MySQLSettings(database=name)


@pytest.mark.parametrize("name", BAD_IDENTIFIERS[:5], ids=repr)
def test_bad_identifiers_are_rejected_from_env_too(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_SOURCES", json.dumps([{**USERS, "table": name}]))
    with pytest.raises(ValidationError):
        load_settings()
    monkeypatch.delenv("DUECAST_SOURCES")
    monkeypatch.setenv("DUECAST_MYSQL__DATABASE", name)
    with pytest.raises(ValidationError):
        load_settings()


@pytest.mark.parametrize("name", GOOD_IDENTIFIERS)
def test_plain_identifiers_are_accepted(name: str) -> None:
    assert _source(table=name, id_column=name, due_column=name).table == name
    assert MySQLSettings(database=name).database == name
    if len(name) + len("_cursors") <= 64:
        assert JobsSettings(table=name).table == name
    else:  # its runs and cursors tables are named after it, and must fit MySQL's 64 characters
        with pytest.raises(ValidationError, match="_cursors"):
            JobsSettings(table=name)


@pytest.mark.parametrize("name", ["Users", "1users", "", "a" * 49, "users-x", "users:x", "jobs x"])
def test_source_names_are_restricted(name: str) -> None:
    """Source names end up in Redis keys after the last ':' (source_of_ready) and in logs."""
    with pytest.raises(ValidationError):
        _source(name=name)


def test_duplicate_source_names_rejected() -> None:
    with pytest.raises(ValidationError, match="unique; repeated: users"):
        Settings(sources=[_source(), _source(table="users2")])


def test_source_names_jobs_and_dotted_are_reserved_for_job_queues() -> None:
    with pytest.raises(ValidationError, match="'jobs' is reserved"):
        Settings(sources=[_source(name=JOBS_SOURCE)])
    with pytest.raises(ValidationError, match=r"may not contain '\.'"):
        Settings(sources=[_source(name="jobs.default")])
