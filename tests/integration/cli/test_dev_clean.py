"""`scripts/dev clean` against real servers: it drops this checkout's databases and Redis keys (the
names scripts/dev derives from the checkout's tag) and nothing of another checkout's or anyone else's.

It runs the script's own Python helper (the code `clean` runs once the servers are found) with a
tag made up for the test, so a real checkout's names are never touched.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from duecast.shared.settings import MySQLSettings, Settings
from duecast.shared.storage.db import connect

pytestmark = pytest.mark.integration

DEV = Path(__file__).resolve().parents[3] / "scripts" / "dev"


def helper() -> str:
    match = re.search(r"^PYHELPER='\n(.*?)^'\n", DEV.read_text(), flags=re.S | re.M)
    assert match, "scripts/dev has no PYHELPER"
    return match.group(1)


@pytest.fixture
def names(mysql_settings: MySQLSettings) -> Iterator[tuple[str, str, list[str], list[str]]]:
    """(tag, other tag, databases of tag, databases of the other tag), created; all dropped afterwards."""
    tag, other = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    ours = [
        f"duecast_dev_{tag}",
        f"duecast_test_{tag}",
        f"duecast_test_{tag}_a1b2c3",
        f"duecast_test_{tag}_a1b2c3_bc",
    ]
    theirs = [f"duecast_dev_{other}", f"duecast_test_{other}_a1b2c3", f"duecast_test_{tag}x"]
    admin = connect(mysql_settings, database=False)
    admin.autocommit(True)
    with admin.cursor() as cur:
        for name in ours + theirs:
            cur.execute(f"CREATE DATABASE `{name}`")
    yield tag, other, ours, theirs
    with admin.cursor() as cur:
        for name in ours + theirs:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()


def existing(mysql: MySQLSettings, candidates: list[str]) -> list[str]:
    admin = connect(mysql, database=False)
    with admin.cursor() as cur:
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
        found = {n for (n,) in cur.fetchall()}
    admin.close()
    return [n for n in candidates if n in found]


def test_clean_drops_this_checkouts_names_only(
    mysql_settings: MySQLSettings, names: tuple[str, str, list[str], list[str]]
) -> None:
    tag, other, ours, theirs = names
    redis_url = Settings().redis.url.get_secret_value()
    client = redis.Redis.from_url(redis_url)
    our_keys = [
        f"{{duecast-dev-{tag}}}:ready:x",
        f"{{duecast-test-{tag}}}:k",
        f"{{duecast-test-{tag}-0a1b2c3d4e}}:k",
    ]
    their_keys = [
        f"{{duecast-dev-{other}}}:ready:x",
        f"{{duecast-test-{other}-0a1b2c3d4e}}:k",
        f"{{duecast-test-{tag}x}}:k",
    ]
    for key in our_keys + their_keys:
        client.set(key, "1")
    try:
        env = {
            **os.environ,
            "CLEAN_TAG": tag,
            "PROBE_HOST": mysql_settings.host,
            "PROBE_PORT": str(mysql_settings.port),
            "PROBE_USER": mysql_settings.user,
            "PROBE_PASSWORD": mysql_settings.password.get_secret_value(),
            "PROBE_URL": redis_url,
        }
        done = subprocess.run(
            [sys.executable, "-c", helper(), "clean"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert f"dropped {len(ours)} database(s)" in done.stderr
        assert f"deleted {len(our_keys)} Redis key(s)" in done.stderr
        assert existing(mysql_settings, ours) == []
        assert existing(mysql_settings, theirs) == theirs, "another checkout's databases were dropped"
        assert [k for k in our_keys if client.exists(k)] == []
        assert [k for k in their_keys if client.exists(k)] == their_keys, (
            "another checkout's keys were deleted"
        )
    finally:
        client.delete(*our_keys, *their_keys)
        client.close()
