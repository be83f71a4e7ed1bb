"""`duecast web` served over HTTP: a sampler thread, idle connections, and the command until SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from duecast.cli.history import History
from duecast.cli.web.context import WebContext
from duecast.cli.web.serve import running
from duecast.shared.settings import MySQLSettings, RedisSettings
from tests.integration.ops.test_health import free_port
from tests.integration.ops.web_helpers import TOKEN, Web, points
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_served_over_http_with_a_sampler_thread(make_web: Callable[..., Web]) -> None:
    web = make_web()
    ctx = WebContext(
        web.settings.model_copy(
            update={"web": web.settings.web.model_copy(update={"sample_interval_s": 0.1})}
        ),
        History(50),
        [],
    )
    with running(ctx, web.sampler) as port:
        wait_until(lambda: len(ctx.history) >= 3, "three readings from the sampler thread")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
            html = resp.read().decode()
        assert points(html, "chart-lag") >= 3
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


IDLE_CONNECTIONS = 150  # waitress's default connection_limit was 100


def test_idle_and_half_sent_connections_cannot_lock_the_dashboard_out(make_web: Callable[..., Web]) -> None:
    """Issue 17: ~100 idle connections stopped the dashboard answering for minutes."""
    web = make_web()
    limits = web.settings.web.model_copy(update={"channel_timeout_s": 2})
    ctx = WebContext(web.settings.model_copy(update={"web": limits}), History(50), [])
    with running(ctx, web.sampler) as port:
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(IDLE_CONNECTIONS)]
        try:
            for sock in idle[::2]:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: slow\r\n")  # the headers never end
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                assert resp.status == 200
            # ...and each is closed once idle for web.channel_timeout_s.
            open_ = set(idle)

            def all_closed() -> bool:
                for sock in list(open_):
                    sock.setblocking(False)
                    try:
                        if sock.recv(1024) == b"":
                            open_.discard(sock)
                    except BlockingIOError:
                        pass
                    except ConnectionError:
                        open_.discard(sock)
                return not open_

            wait_until(all_closed, "the server to close every idle connection", timeout_s=15)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                assert resp.status == 200
        finally:
            for sock in idle:
                sock.close()


def test_the_web_command_serves_until_sigterm(
    make_web: Callable[..., Web], mysql_settings: MySQLSettings, redis_settings: RedisSettings
) -> None:
    web = make_web()
    port = free_port()
    env = {
        **os.environ,
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_SOURCES": f'[{{"name": "users", "table": "{web.settings.sources[0].table}", '
        '"id_column": "user_id", "due_column": "updated_time", "period_s": 10}]',
        "DUECAST_JOBS__TABLE": web.jobs_table,
        "DUECAST_JOBS__SCHEDULES_TABLE": web.settings.jobs.schedules_table,
        "DUECAST_WEB__TOKEN": TOKEN,
        "DUECAST_LOG_FORMAT": "json",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "duecast", "web", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                    return resp.status == 200
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[1]
                return False

        wait_until(answers, "duecast web to answer", timeout_s=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert '"event": "web.started"' in err
    assert TOKEN not in err
