"""Every ```python and ```sh block of README.md and docs/*.md runs against real servers, or is marked
`<!-- excerpt: why -->` on the line before it (the convention README.md's "Documentation" states).

Python blocks run as a reader runs a page: each in a fresh interpreter, after the page's earlier
Python blocks (a later block uses `tasks` or `handlers` declared above it) and after a prelude of
stand-ins for the reader's own application (`mailer`, `billing`, `conn`, `cur`, `emails`...; a
configured Django project and a SQLAlchemy `engine` for programs that import them). A
block that opens with `# myapp/x.py` is also written to that file, so `--app myapp.x` finds it. Sh
blocks run in bash, after the Python blocks. Everything runs in a database and key prefix of its
own, migrated, with jobs.queues `default, media` and topics `orders, audit` (the pages' settings).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pymysql
import pytest
import redis

from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect
from tests.conftest import TEST_DATABASE, TEST_PREFIX
from tests.integration.docblocks import Block, blocks

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("python", "sh")
QUEUES = ["default", "media"]
TOPICS = ["orders", "audit"]
# An sh block is run only if each of its commands is duecast's own (never pip, scripts/dev, a
# benchmark...): anything else must be marked an excerpt, so a new block cannot touch the machine.
SAFE_SH = re.compile(r"duecast [a-z]")

PRELUDE = '''
# Stand-ins for the reader's own application, which the blocks use without defining.
import logging
import os

import pymysql


class _Service:
    """Any call answers True: mailer.send(...), billing.ready(...), reports.build(...)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: True


mailer = billing = reports = local_cache = _Service()
log = logging.getLogger("myapp")
emails = ["a@example.com", "b@example.com"]
email = "c@example.com"
events = ["login", "logout"]


def is_blocked(user_id):
    return False


async def shows_banned_page(user_id):
    return False


class _AsyncService:
    """Any call is awaitable and answers True: await reports_service.build(...)."""

    def __getattr__(self, name):
        async def call(*args, **kwargs):
            return True

        return call


reports_service = _AsyncService()


conn = pymysql.connect(
    host=os.environ["DUECAST_MYSQL__HOST"], port=int(os.environ["DUECAST_MYSQL__PORT"]),
    user=os.environ["DUECAST_MYSQL__USER"], password=os.environ["DUECAST_MYSQL__PASSWORD"],
    database=os.environ["DUECAST_MYSQL__DATABASE"],
)
cur = conn.cursor()
'''


# The reader's Django project and SQLAlchemy engine, for the programs that use them (the outbox
# snippets): Django on its default MySQL driver (mysqlclient), SQLAlchemy on PyMySQL.
DJANGO_PRELUDE = """
import django
from django.conf import settings as _django_settings

_django_settings.configure(DATABASES={"default": {
    "ENGINE": "django.db.backends.mysql", "NAME": os.environ["DUECAST_MYSQL__DATABASE"],
    "USER": os.environ["DUECAST_MYSQL__USER"], "PASSWORD": os.environ["DUECAST_MYSQL__PASSWORD"],
    "HOST": os.environ["DUECAST_MYSQL__HOST"], "PORT": os.environ["DUECAST_MYSQL__PORT"],
}})
django.setup()
"""
SQLALCHEMY_PRELUDE = """
import sqlalchemy

engine = sqlalchemy.create_engine(sqlalchemy.URL.create(
    "mysql+pymysql",
    username=os.environ["DUECAST_MYSQL__USER"], password=os.environ["DUECAST_MYSQL__PASSWORD"],
    host=os.environ["DUECAST_MYSQL__HOST"], port=int(os.environ["DUECAST_MYSQL__PORT"]),
    database=os.environ["DUECAST_MYSQL__DATABASE"],
))
"""


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.lang in RUNNABLE]


def run_blocks() -> list[Block]:
    return [b for b in all_blocks() if not b.excerpt]


def module_path(block: Block) -> str | None:
    """`myapp/tasks.py` for a block opening with `# myapp/tasks.py`."""
    match = re.match(r"# ([\w/]+\.py)\n", block.text)
    return match.group(1) if match else None


def test_every_block_is_run_or_marked_an_excerpt() -> None:
    """A block is run unless marked; a note before a block is either the excerpt mark or nothing,
    so a misspelt mark (`<!-- exerpt -->`) cannot silently hide a block."""
    found = all_blocks()
    assert found, "no blocks found: the pages moved?"
    odd = [b.where(ROOT) + f": <!-- {b.note} -->" for b in found if b.note and not b.excerpt]
    assert not odd, "a comment before a block that is not the excerpt mark:\n" + "\n".join(odd)
    assert any(b.lang == "python" for b in run_blocks())
    assert any(b.lang == "sh" for b in run_blocks())


@pytest.fixture(scope="module")
def docs_env(
    mysql_settings: MySQLSettings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The environment the blocks run in: a migrated database and a key prefix of their own."""
    database = f"{TEST_DATABASE}_docs_{uuid.uuid4().hex[:4]}"
    prefix = f"{TEST_PREFIX}-docs-{uuid.uuid4().hex[:8]}"
    mysql = mysql_settings.model_copy(update={"database": database})
    redis_settings = RedisSettings(**{**Settings().redis.model_dump(), "key_prefix": prefix})
    admin = connect(mysql_settings, database=False)
    admin.autocommit(True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    settings = Settings(mysql=mysql, redis=redis_settings, jobs={"queues": QUEUES}, topics={"names": TOPICS})
    migrate.apply(settings)
    conn = connect(mysql)
    conn.autocommit(True)
    with conn.cursor() as cur:  # the reader's own tables, which the outbox snippets write to
        cur.execute("CREATE TABLE users (id BIGINT AUTO_INCREMENT PRIMARY KEY, email VARCHAR(191) NOT NULL)")
        cur.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, total INT NOT NULL)")
    conn.close()
    cwd = tmp_path_factory.mktemp("docs")
    for block in run_blocks():
        if block.lang == "python" and (path := module_path(block)):
            (cwd / path).parent.mkdir(parents=True, exist_ok=True)
            (cwd / path).write_text(block.text)
    (cwd / "jobs.jsonl").write_text(
        json.dumps({"task": "send_welcome", "payload": {"email": "d@example.com"}}) + "\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUECAST_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
        PYTHONPATH=f"{cwd}:{ROOT}",
        PYTHONDONTWRITEBYTECODE="1",
        DOCS_CWD=str(cwd),
        DUECAST_MYSQL__HOST=mysql.host,
        DUECAST_MYSQL__PORT=str(mysql.port),
        DUECAST_MYSQL__USER=mysql.user,
        DUECAST_MYSQL__PASSWORD=mysql.password.get_secret_value(),
        DUECAST_MYSQL__DATABASE=database,
        DUECAST_REDIS__URL=redis_settings.url.get_secret_value(),
        DUECAST_REDIS__KEY_PREFIX=prefix,
        DUECAST_JOBS__QUEUES=json.dumps(QUEUES),
        DUECAST_TOPICS__NAMES=json.dumps(TOPICS),
        DUECAST_WORKER__APP="myapp.tasks:tasks",  # what `duecast enqueue` checks task names against
    )
    yield env
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    admin.close()
    client = redis.Redis.from_url(redis_settings.url.get_secret_value())
    keys = list(client.scan_iter(match=f"{{{prefix}}}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@contextmanager
def connect_docs(env: dict[str, str]) -> Iterator[pymysql.cursors.Cursor]:
    """An autocommit cursor on the blocks' database."""
    conn = pymysql.connect(
        host=env["DUECAST_MYSQL__HOST"],
        port=int(env["DUECAST_MYSQL__PORT"]),
        user=env["DUECAST_MYSQL__USER"],
        password=env["DUECAST_MYSQL__PASSWORD"],
        database=env["DUECAST_MYSQL__DATABASE"],
        autocommit=True,
    )
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def commands(block: Block) -> list[str]:
    """The block's command lines (comment-only lines dropped)."""
    return [
        line.strip() for line in block.text.splitlines() if line.strip() and not line.strip().startswith("#")
    ]


def program(block: Block) -> str:
    """The prelude, the page's earlier runnable Python blocks, then this one."""
    earlier = [b for b in run_blocks() if b.path == block.path and b.lang == "python" and b.line < block.line]
    texts = [*(b.text for b in earlier), block.text]
    frameworks = [
        prelude
        for prelude, name in ((DJANGO_PRELUDE, "from django"), (SQLALCHEMY_PRELUDE, "from sqlalchemy"))
        if any(name in text for text in texts)
    ]
    return "\n".join([PRELUDE, *frameworks, *texts])


@pytest.mark.parametrize("block", run_blocks(), ids=lambda b: b.where(ROOT))
def test_block_runs(block: Block, docs_env: dict[str, str]) -> None:
    with connect_docs(docs_env) as cur:  # each block starts from empty tables (unique keys, ids)
        for table in ("duecast_jobs", "users", "orders"):
            cur.execute(f"DELETE FROM {table}")
    if block.lang == "python":
        args = [sys.executable, "-c", program(block)]
    else:
        unsafe = [line for line in commands(block) if not SAFE_SH.match(line)]
        assert not unsafe, (
            f"{block.where(ROOT)}: not run (only `duecast ...` commands are): {unsafe}; mark it an excerpt"
        )
        args = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    done = subprocess.run(
        args, check=False, cwd=docs_env["DOCS_CWD"], env=docs_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{block.where(ROOT)} failed:\n{block.text}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
