# ruff: noqa: F811 - the fault tier's fixtures are imported to be used here by name
"""Chaos fixtures: a private redis-server (restarted and flushed by the scenarios), the process
table, and a seed from DUECAST_CHAOS_SEED (or a fresh one, printed) for each scenario."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from duecast.shared.settings import MySQLSettings
from tests.chaos.harness import Chaos

# Expose the fault tier's fixtures (procs, private_redis) and its failure report hook.
from tests.faults.conftest import private_redis, procs, pytest_runtest_makereport  # noqa: F401
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Procs


@pytest.fixture
def chaos(
    mysql_settings: MySQLSettings,
    private_redis: PrivateRedis,
    procs: Procs,
    tmp_path: Path,
) -> Iterator[Chaos]:
    seed = int(os.environ.get("DUECAST_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    run = Chaos(mysql_settings, private_redis, procs, tmp_path, seed)
    try:
        yield run
    finally:
        procs.kill_all()
        run.close()
