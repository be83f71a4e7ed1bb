"""Fixtures shared by all tiers: settings pointing at our own test database and key prefix.

Servers come from DUECAST_* (scripts/dev sets them, starting private servers when none answer).
Integration and fault tiers fail loudly, never skip, when a server is unreachable. Reports carry
only text UTF-8 can encode (pytest-xdist sends them between processes), and the fault and chaos
tiers are marked `serial`: `scripts/dev test` runs them after the parallel phase, one at a time.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import redis

from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.db import connect

# One database per pytest session (dropped at its end): two runs on one server never collide.
TEST_DATABASE = f"{os.environ.get('DUECAST_MYSQL__DATABASE', 'duecast_test')}_{uuid.uuid4().hex[:6]}"
# Each test's key prefix starts with this (scripts/dev: duecast-test-<checkout tag>, which its `clean` finds).
TEST_PREFIX = os.environ.get("DUECAST_REDIS__KEY_PREFIX", "duecast-test")
# Tiers whose tests start, kill and time real processes against recovery bounds: never beside others.
SERIAL_TIERS = ("faults", "chaos")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test of the serial tiers `serial`, and the chaos scenarios and the integration
    tests marked serial by hand also `alone` (scripts/dev test: `-m "not serial"` on 2 processes,
    then `-m "serial and not alone"` on 3 processes, then `-m alone` in one). A few fault tests
    that count handler calls per second are marked `alone` by hand.

    `alone` tests start a whole fleet and time it, or run a worker inside the test's own process
    (whose lease watchdog ends the process if a loaded machine stalls its renewals: beside the
    fault tier it killed a pytest-xdist worker in a clean-clone run), so they run by themselves."""
    tiers = [TESTS / tier for tier in SERIAL_TIERS]
    chaos = TESTS / "chaos"
    for item in items:
        in_tier = any(tier in item.path.resolve().parents for tier in tiers)
        if in_tier:
            item.add_marker(pytest.mark.serial)
        if chaos in item.path.resolve().parents or (not in_tier and item.get_closest_marker("serial")):
            item.add_marker(pytest.mark.alone)


def _encodable(text: str) -> str:
    """`text` itself when UTF-8 can encode it; else with each lone surrogate as a `\\udcff` escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Captured output and failure text a lone surrogate cannot be sent as: a pytest-xdist worker
    serialises each report as UTF-8 and dies on one (a test logging a non-UTF-8 file name, read with
    surrogateescape, did). Outermost wrapper, so sections other hooks append are covered too."""
    report = yield
    report.sections = [(title, _encodable(text)) for title, text in report.sections]
    if isinstance(report.longrepr, tuple):  # a skip: (path, line, reason)
        path, line, reason = report.longrepr
        report.longrepr = (_encodable(path), line, _encodable(reason))
    elif report.longrepr is not None:
        text = str(report.longrepr)
        if _encodable(text) != text:
            report.longrepr = _encodable(text)
    return report


def _mysql_settings() -> MySQLSettings:
    return Settings().mysql.model_copy(update={"database": TEST_DATABASE})


@pytest.fixture(scope="session")
def mysql_settings() -> Iterator[MySQLSettings]:
    """Settings for our own database, created for the session and dropped afterwards."""
    settings = _mysql_settings()
    try:
        conn = connect(settings, database=False)
    except pymysql.err.OperationalError as exc:
        pytest.fail(
            f"MariaDB/MySQL unreachable at {settings.host}:{settings.port} ({exc}); "
            "run the tests with `scripts/dev test`",
            pytrace=False,
        )
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{TEST_DATABASE}`")
        cur.execute(f"CREATE DATABASE `{TEST_DATABASE}` CHARACTER SET utf8mb4")
    conn.commit()
    yield settings
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{TEST_DATABASE}`")
    conn.close()


@pytest.fixture
def sql(mysql_settings: MySQLSettings) -> Iterator[pymysql.cursors.Cursor]:
    """An autocommit cursor on the test database, for arranging and asserting rows."""
    conn = connect(mysql_settings)
    conn.autocommit(True)
    with conn.cursor() as cur:
        yield cur
    conn.close()


@pytest.fixture
def holder(mysql_settings: MySQLSettings) -> Iterator[pymysql.cursors.Cursor]:
    """Another session, as an application's or another worker's: takes row locks in a transaction
    it leaves open until the test ends it."""
    conn = connect(mysql_settings)
    with conn.cursor() as cur:
        yield cur
    conn.rollback()
    conn.close()


@pytest.fixture
def redis_settings() -> Iterator[RedisSettings]:
    """The configured Redis under a key prefix unique to this test; its keys are deleted after."""
    base = Settings().redis
    prefix = f"{TEST_PREFIX}-{uuid.uuid4().hex[:10]}"
    settings = base.model_copy(update={"key_prefix": prefix})
    client = redis.Redis.from_url(settings.url.get_secret_value(), socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis unreachable ({exc}); run the tests with `scripts/dev test`", pytrace=False)
    yield settings
    keys = list(client.scan_iter(match=f"{{{prefix}}}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
