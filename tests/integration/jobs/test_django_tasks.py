"""examples/django_shop end to end (issue 23): Django's task API on duecast. A view enqueues in its
atomic(); a rollback leaves no job; `duecast worker --app duecast.integrations.django.worker` runs
them; get_result returns the value. Once per MySQL driver Django can use (mysqlclient, PyMySQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from duecast.shared.settings import MySQLSettings, RedisSettings
from duecast.shared.storage.db import connect
from tests.conftest import TEST_DATABASE

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SHOP = ROOT / "examples" / "django_shop"
CLIENT = """
import json, os, sys
import django
django.setup()
from django.test import Client
client = Client(raise_request_exception=False)
if sys.argv[1] == "order":
    r = client.post("/orders", json.loads(sys.argv[2]), content_type="application/json")
    print(json.dumps({"status": r.status_code, "body": r.json() if r.status_code == 200 else None}))
else:
    print(client.get("/results/" + sys.argv[2]).content.decode())
"""


@pytest.fixture
def shop_env(mysql_settings: MySQLSettings, redis_settings: RedisSettings) -> Iterator[dict[str, str]]:
    database = f"{TEST_DATABASE}_dj_{uuid.uuid4().hex[:6]}"
    admin = connect(mysql_settings, database=False)
    admin.autocommit(True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUECAST_")}
    env.update(
        PYTHONPATH=f"{SHOP}:{ROOT}",
        DJANGO_SETTINGS_MODULE="shop.settings",
        DUECAST_MYSQL__HOST=mysql_settings.host,
        DUECAST_MYSQL__PORT=str(mysql_settings.port),
        DUECAST_MYSQL__USER=mysql_settings.user,
        DUECAST_MYSQL__PASSWORD=mysql_settings.password.get_secret_value(),
        DUECAST_MYSQL__DATABASE=database,
        DUECAST_REDIS__URL=redis_settings.url.get_secret_value(),
        DUECAST_REDIS__KEY_PREFIX=redis_settings.key_prefix,
        DUECAST_JOBS__RETENTION_S="3600",  # results are read back
        DUECAST_WORKER__BLOCK_TIMEOUT_S="0.2",
    )
    try:
        yield env
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        admin.close()


def run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=SHOP, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def jobs(env: dict[str, str]) -> list[tuple[str, str]]:
    conn = connect(
        MySQLSettings(
            host=env["DUECAST_MYSQL__HOST"],
            port=int(env["DUECAST_MYSQL__PORT"]),
            user=env["DUECAST_MYSQL__USER"],
            password=env["DUECAST_MYSQL__PASSWORD"],
            database=env["DUECAST_MYSQL__DATABASE"],
        )
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT task, payload FROM duecast_jobs ORDER BY id")
            return [(str(t), str(p)) for t, p in cur.fetchall()]
    finally:
        conn.close()


@pytest.mark.parametrize("driver", ["mysqlclient", "pymysql"])
def test_the_django_shop_enqueues_in_atomic_and_reads_results(driver: str, shop_env: dict[str, str]) -> None:
    env = {**shop_env, "SHOP_MYSQL_DRIVER": driver}
    run(env, "manage.py", "migrate", "-v", "0")
    run(env, "-m", "duecast", "migrate")
    assert "no issues" in run(env, "manage.py", "check").lower()

    placed = json.loads(run(env, "-c", CLIENT, "order", '{"email": "ada@example.com", "total_cents": 1999}'))
    assert placed["status"] == 200
    failed = json.loads(
        run(env, "-c", CLIENT, "order", '{"email": "bo@example.com", "total_cents": 5, "fail": 1}')
    )
    assert failed["status"] == 500
    # The rolled-back view left no job; the committed one left its two.
    assert [task for task, _ in jobs(env)] == ["django", "django.async"]
    assert json.loads(jobs(env)[0][1]) == {
        "task": "shop.tasks.send_receipt",
        "args": [placed["body"]["order"]],
        "kwargs": {},
    }
    before = json.loads(run(env, "-c", CLIENT, "result", placed["body"]["receipt"]))
    assert before == {"status": "READY", "value": None, "attempts": 0}

    run(env, "-m", "duecast", "dispatcher", "--drain")
    run(env, "-m", "duecast", "worker", "--app", "duecast.integrations.django.worker", "--drain")

    receipt = json.loads(run(env, "-c", CLIENT, "result", placed["body"]["receipt"]))
    assert receipt == {
        "status": "SUCCESSFUL",
        "value": {"order": placed["body"]["order"], "to": "ada@example.com", "total_cents": 1999},
        "attempts": 1,
    }
    warehouse = json.loads(run(env, "-c", CLIENT, "result", placed["body"]["warehouse"]))
    assert warehouse["status"] == "SUCCESSFUL"
