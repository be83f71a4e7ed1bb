"""shared/limits.py and what every Ack obeys (issue 25, items 1, 12 and 13): one cap on delays and
moments, as enqueue's; error text utf8mb4 can store; a row source's own columns and the actions it
has no meaning for refused with a clear one-line error, before any SQL."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pymysql
import pytest

from duecast.shared.acks import Ack, check_times
from duecast.shared.limits import ERROR_TEXT_MAX, MAX_DELAY_S, delay_refusal, moment_refusal, storable_text
from duecast.shared.settings import MySQLSettings, SourceSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.range_store import RangeStore
from duecast.shared.storage.units import ValueRefused, is_transient, translate
from tests.unit.fakes import FakeStore, rescan_source

NOW = datetime(2026, 1, 1, tzinfo=UTC)


# -- the pure limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "why"),
    [
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (-1e12, "must be 0-315360000 s (jobs.max_delay_s)"),
        (1e18, "must be 0-315360000 s"),
        (1e10, "must be 0-315360000 s"),  # Ack.retry(delay_s=1e10) was accepted: the year 2343
        ("5", "a number of seconds"),
        (True, "a number of seconds"),
    ],
    ids=repr,
)
def test_a_delay_past_the_cap_or_not_a_finite_number_is_refused(delay: object, why: str) -> None:
    refusal = delay_refusal(delay, MAX_DELAY_S)
    assert refusal is not None
    assert why in refusal


def test_delays_within_the_cap_pass() -> None:
    assert [delay_refusal(d, MAX_DELAY_S) for d in (0, 0.0, 1, MAX_DELAY_S)] == [None] * 4


def test_a_moment_past_the_cap_or_naive_is_refused() -> None:
    assert moment_refusal(NOW + timedelta(days=1), NOW, MAX_DELAY_S) is None
    assert moment_refusal(datetime(1960, 1, 1, tzinfo=UTC), NOW, MAX_DELAY_S) is not None
    end = moment_refusal(datetime(9999, 12, 31, tzinfo=UTC), NOW, MAX_DELAY_S)
    assert end is not None
    assert "jobs.max_delay_s" in end
    assert "timezone-aware" in (moment_refusal(datetime(2026, 1, 2), NOW, MAX_DELAY_S) or "")


def test_error_text_is_made_storable_escaping_surrogates_and_cut_to_its_limit() -> None:
    name = b"report-\xff.csv".decode("utf-8", "surrogateescape")
    assert storable_text(f"cannot open {name}") == "cannot open report-\\udcff.csv"
    huge = storable_text("x" * 20_000_000)
    assert len(huge) <= ERROR_TEXT_MAX
    assert huge.endswith("...(truncated)")
    many = storable_text("\ud800" * ERROR_TEXT_MAX)  # each escape is 6 characters: cut again after
    assert len(many) <= ERROR_TEXT_MAX
    many.encode("utf-8")
    assert storable_text("plain") == "plain"


# -- Ack: constructors and the stores' check -----------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Ack.retry(delay_s=1e18),
        lambda: Ack.touch(delay_s=1e18),
        lambda: Ack.retry(delay_s=float("nan")),
        lambda: Ack.retry(delay_s=-1),
        lambda: Ack.retry(at=datetime(9999, 12, 31, tzinfo=UTC)),
        lambda: Ack.retry(at=datetime(2026, 1, 1)),
    ],
)
def test_ack_constructors_refuse_what_no_setting_allows(make: Any) -> None:
    with pytest.raises(ValueError, match=r"delay_s must|Ack\.retry\(at=\.\.\.\) must"):
        make()


def test_a_discard_reason_is_made_storable() -> None:
    assert Ack.discard("bad \udcff").reason == "bad \\udcff"
    assert len(Ack.discard("x" * 20_000_000).reason) <= ERROR_TEXT_MAX


@pytest.mark.parametrize(
    ("ack", "why"),
    [
        (Ack("retry", delay_s=float("nan")), "finite"),
        (Ack("retry", delay_s=float("inf")), "finite"),
        (Ack("retry", delay_s=-1e12), "0-315360000"),
        (Ack("retry", delay_s=1e18), "0-315360000"),
        (Ack.retry(delay_s=20 * 365 * 86400.0), "0-315360000 s (jobs.max_delay_s)"),  # the setting's cap
        (Ack("retry", at=datetime(9999, 12, 31)), "at must be between 1970"),
        (Ack("touch", delay_s=1e18), "0-315360000"),
        (Ack("discard", reason=cast(str, 5)), "reason must be a string"),
    ],
    ids=repr,
)
def test_every_ack_a_store_applies_is_checked_against_the_configured_cap(ack: Ack, why: str) -> None:
    with pytest.raises(ValueError, match=r"^Ack\.\w+\(\): ") as refused:
        check_times(ack, MAX_DELAY_S, NOW)
    assert why in str(refused.value)
    check_times(Ack.retry(delay_s=MAX_DELAY_S), MAX_DELAY_S, NOW)  # the cap itself is fine


# -- a row source's acks (item 12 and 13): SourceStore.group_key, before any SQL -----------------------


def _row_store() -> FakeStore:
    return FakeStore(rescan_source(), columns=("status",))


@pytest.mark.parametrize(
    ("ack", "why"),
    [
        (Ack.touch(updated_time="2099-01-01"), "the due column of source users; duecast sets it"),
        (Ack.touch(user_id=99), "duecast's own column of source users"),
        (Ack.retry(5), "Ack.retry() is for jobs and consumer groups; a row of source users takes"),
        (Ack.discard("no"), "Ack.discard() is for jobs and consumer groups"),
        (Ack("touch", delay_s=float("nan")), "finite"),
        (Ack("touch", delay_s=1e18), "jobs.max_delay_s"),
    ],
    ids=repr,
)
def test_a_row_source_refuses_its_own_columns_and_actions_it_has_no_meaning_for(ack: Ack, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)) as refused:
        _row_store().group_key(ack)
    assert "\n" not in str(refused.value)


def test_a_row_source_takes_its_other_columns_and_a_capped_delay() -> None:
    assert _row_store().group_key(Ack.touch(delay_s=MAX_DELAY_S, status=3)) == (
        "touch",
        MAX_DELAY_S,
        (("status", 3),),
    )


def _range_store() -> RangeStore:
    business = SourceSettings.model_validate(
        {
            "name": "docs",
            "table": "docs",
            "id_column": "id",
            "due_column": "checked_at",
            "period_s": 60,
            "mode": "ranges",
        }
    )
    store = RangeStore(Database(MySQLSettings()), business)  # never connects: group_key runs no SQL
    store.columns = frozenset({"id", "checked_at", "title"})
    return store


@pytest.mark.parametrize(
    ("ack", "why"),
    [
        (Ack.touch(id=5), "duecast's own column of source docs"),
        (Ack.touch(checked_at="2099-01-01"), "the due column of source docs"),
        (Ack.retry(1), "Ack.retry() is for jobs and consumer groups"),
        (Ack("touch", delay_s=1e18), "jobs.max_delay_s"),
    ],
    ids=repr,
)
def test_a_range_source_refuses_the_same(ack: Ack, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        _range_store().group_key(ack)
    assert _range_store().group_key(Ack.touch(title="t")) == ("touch", (("title", "t"),))


@pytest.mark.parametrize(
    "driver",
    [
        pymysql.err.OperationalError(1916, "Got overflow when converting '1e24' to DATETIME"),
        pymysql.err.InternalError(1366, "Incorrect integer value: 'x' for column `status`"),
        pymysql.err.DataError(1406, "Data too long for column 'payload'"),
    ],
    ids=lambda e: str(e.args[0]),
)
def test_a_value_the_database_refuses_is_a_value_refusal_whatever_the_driver_class(driver: Exception) -> None:
    """1916 was an OperationalError outside the "value errors" (issue 25, item 1)."""
    mine = translate(driver)
    assert isinstance(mine, ValueRefused)
    assert mine.code == driver.args[0]
    assert not is_transient(driver)
