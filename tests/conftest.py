"""Fixtures shared by all tiers: settings pointing at our own test database and key prefix.

Servers come from DUECAST_* (scripts/dev sets them, starting private servers when none answer).
Integration and fault tiers fail loudly, never skip, when a server is unreachable.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pymysql
import pytest
import redis

from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.db import connect

# One database per pytest session (dropped at its end): two runs on one server never collide.
TEST_DATABASE = f"{os.environ.get('DUECAST_MYSQL__DATABASE', 'duecast_test')}_{uuid.uuid4().hex[:6]}"
# Each test's key prefix starts with this (scripts/dev: duecast-test-<checkout tag>, which its `clean` finds).
TEST_PREFIX = os.environ.get("DUECAST_REDIS__KEY_PREFIX", "duecast-test")


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
