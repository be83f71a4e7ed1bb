"""The dashboard's topics page (`duecast web`, /topics) through Flask's test client, on real MariaDB:
groups with their backlog, dead letters and consumption timeouts, and topics ranked by volume."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.cli.history import History
from duecast.cli.web.app import create_app
from duecast.cli.web.context import WebContext
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.entries import Entry
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.worker.main import serve as serve_worker
from tests.integration import topics_app

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    prefix = f"w{uuid.uuid4().hex[:8]}_"
    groups = [
        {"topic": "orders", "name": "billing", "start": "earliest", "max_retries": 0},
        {"topic": "orders", "name": "shipping", "start": "earliest", "timeout_s": 60},
        {"topic": "orders", "name": "audit", "start": "earliest"},
        {"topic": "orders", "name": "cache", "mode": "broadcast", "start": "earliest"},
        {"topic": "ledger", "name": "books", "start": "earliest"},
    ]
    built = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"enabled": False},  # type: ignore[arg-type]
        topics={"table_prefix": prefix, "names": ["orders", "ledger"], "groups": groups},  # type: ignore[arg-type]
        worker={"app": "tests.integration.topics_app", "block_timeout_s": 0.1},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        web={"refresh_s": 0, "port": 0, "host": "127.0.0.1"},  # type: ignore[arg-type]
    )
    migrate.apply(built)
    topics_app.RUNS.clear()
    yield built
    for kind in ("topics", "messages", "groups", "deliveries", "attempts", "members"):
        sql.execute(f"DROP TABLE IF EXISTS `{built.topics.table(kind)}`")


def cells(html: str, attr: str, key: str) -> list[str]:
    """The cells' text of the row `data-<attr>="<key>"`, tags stripped."""
    row = re.search(rf'data-{attr}="{re.escape(key)}">(.*?)</tr>', html, re.S)
    assert row, f"no row {key}"
    return [
        re.sub(r"<[^>]+>|\s+", " ", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    ]


def test_the_topics_page_shows_groups_dead_letters_timeouts_and_volume(
    settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    publisher = Publisher(settings, None)
    publisher.publish_many(Publish("orders", {"fail": ["billing"]} if n == 0 else n) for n in range(5))
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)
    ids = publisher.publish_many(Publish("orders", n) for n in range(2))
    serve_dispatcher(settings, threading.Event(), drain=True)
    (shipping,) = [
        s for s in build_stores(settings, settings.topics.group_sources()) if "shipping" in s.src.name
    ]
    client = create_app(WebContext(settings, History(10), [])).test_client()
    with shipping.started([Entry(i, 1) for i in ids]):
        deliveries = settings.topics.table("deliveries")
        sql.execute(f"UPDATE `{deliveries}` SET started_at = NOW(6) - INTERVAL 2 MINUTE WHERE dc_state = 2")
        resp = client.get("/topics")
    assert resp.status_code == 200
    html = resp.get_data(as_text=True)
    # topic, group, mode, last id, position, backlog, lag, pending, in flight, dead, timeouts, skipped
    billing = cells(html, "group", "orders-billing")
    assert billing[:6] == ["orders", "billing", "cluster", "7", "7", "2"]
    assert billing[8:10] == ["2", "1"]  # the 2 new messages in flight; message 1 dead
    shipping_row = cells(html, "group", "orders-shipping")
    # Both marked running 2 minutes ago, past its 60 s limit, in one batch: counted once, since the
    # second may only be waiting behind the first (issue 16.7).
    assert shipping_row[8:11] == ["2", "0", "1"]
    assert re.fullmatch(r"running &gt; 1m 00s \(oldest 2m 0\ds\)", shipping_row[12])
    assert "0 live member(s)" in cells(html, "group", "orders-cache")[12]  # the drained worker's left
    assert cells(html, "topic", "orders")[:3] == ["orders", "7", "7"]
    assert 'href="/topics" class="here"' in html
