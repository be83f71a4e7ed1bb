"""Fixtures the servers tests share: the throwaway CA that signs the private TLS servers' certificates,
and the accounts of sql/grants.sql (one set per test module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from duecast.shared.settings import MySQLSettings, RedisSettings
from tests.integration.servers.grants_env import Granted, granted_database
from tests.integration.tls_servers import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def granted(mysql_settings: MySQLSettings) -> Iterator[Granted]:
    with granted_database(mysql_settings) as state:
        yield state


@pytest.fixture
def roles(granted: Granted, redis_settings: RedisSettings) -> Granted:
    """The module's accounts with this test's own Redis key prefix."""
    granted.redis = redis_settings
    return granted
