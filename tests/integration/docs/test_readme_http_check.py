"""README's HTTP check, as printed, in a real `duecast worker --drain` against a local stub of the
service: its aiohttp session is opened by the app's on_start hook and closed by on_stop, so the
worker's stop reports no "Unclosed client session", and every user's status is what the stub said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from tests.integration.conftest import Env
from tests.integration.docblocks import blocks

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
USERS = 30


class Pages(BaseHTTPRequestHandler):
    """The stub service: a user whose id is a multiple of 3 shows the banned page (451)."""

    def do_GET(self) -> None:
        user_id = int(self.path.rsplit("/", 1)[-1])
        self.send_response(451 if user_id % 3 == 0 else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def readme_app(where: Path) -> None:
    """README's `# myapp/handlers.py` block as that module, and an app pointing its PAGES at the stub."""
    (block,) = [b for b in blocks(ROOT / "README.md") if b.text.startswith("# myapp/handlers.py\n")]
    (where / "myapp").mkdir()
    (where / "myapp" / "handlers.py").write_text(block.text)
    (where / "stubbed.py").write_text(
        "import os\n\nfrom myapp import handlers as app\n\n"
        'app.PAGES = os.environ["STUB_URL"]\nhandlers = app.handlers\n'
    )


def test_readme_http_check_closes_its_session_at_the_worker_stop(
    make_env: Callable[..., Env], stub: str, tmp_path: Path
) -> None:
    env = make_env("rescan", rows=USERS, name="user_block_status")
    readme_app(tmp_path)
    serve_dispatcher(env.settings, threading.Event(), drain=True)  # every user on the ready list
    mysql = env.settings.mysql
    child_env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}:{ROOT}",
        "STUB_URL": stub,
        "DUECAST_MYSQL__HOST": mysql.host,
        "DUECAST_MYSQL__PORT": str(mysql.port),
        "DUECAST_MYSQL__USER": mysql.user,
        "DUECAST_MYSQL__PASSWORD": mysql.password.get_secret_value(),
        "DUECAST_MYSQL__DATABASE": mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": env.settings.redis.key_prefix,
        "DUECAST_SOURCES": json.dumps([env.source.model_dump(mode="json")]),
        "DUECAST_JOBS__ENABLED": "false",
    }
    done = subprocess.run(
        [sys.executable, "-m", "duecast", "worker", "--app", "stubbed:handlers", "--drain"],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Unclosed client session" not in done.stderr
    assert "Unclosed connector" not in done.stderr
    env.sql.execute(f"SELECT user_id, status FROM `{env.table}` ORDER BY user_id")
    statuses = dict(env.sql.fetchall())
    assert statuses == {u: 2 if u % 3 == 0 else 1 for u in range(1, USERS + 1)}
