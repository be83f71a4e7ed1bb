"""The dispatcher and a registered worker (its pop-and-hold, redelivery, counters) run end to end
under exactly the Redis ACL line docs/security.md documents, which grants no scripting (issue 25.3).

The ACL user is the test's own, on its own key prefix, and deleted after.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from pydantic import SecretStr

from duecast.shared.settings import RedisSettings
from duecast.worker import main as worker_main
from tests.integration import apps
from tests.integration.flow.roles_helpers import MakeEnv, dispatch, handled_once, role_settings, work
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

SECURITY = Path(__file__).resolve().parents[3] / "docs" / "security.md"


def documented_acl() -> list[str]:
    """The rules of docs/security.md's `ACL SETUSER duecast ...` line, after the password."""
    (line,) = re.findall(r"^ACL SETUSER duecast on >PASSWORD (.+)$", SECURITY.read_text(), re.M)
    return line.split()


@pytest.fixture
def acl_redis(redis_settings: RedisSettings) -> Iterator[RedisSettings]:
    admin = redis.Redis.from_url(redis_settings.url.get_secret_value(), socket_timeout=5)
    user, password = f"dcacl-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rules = [r.replace("{duecast}", "{" + redis_settings.key_prefix + "}") for r in documented_acl()]
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", *rules)
    url = urlsplit(redis_settings.url.get_secret_value())
    netloc = f"{user}:{password}@{url.hostname}:{url.port or 6379}"
    try:
        yield redis_settings.model_copy(update={"url": SecretStr(urlunsplit(url._replace(netloc=netloc)))})
    finally:
        admin.acl_deluser(user)
        admin.close()


def test_the_documented_acl_grants_no_scripting() -> None:
    rules = documented_acl()
    assert not [r for r in rules if re.search(r"eval|script|@all|@scripting", r, re.I) and r != "-@all"]


def test_dispatcher_and_worker_run_under_the_documented_acl(
    make_env: MakeEnv, recorder: apps.Recorder, acl_redis: RedisSettings
) -> None:
    env = make_env("rescan", rows=300, name=apps.RESCAN)
    settings = role_settings(env).model_copy(update={"redis": acl_redis})
    dispatch(settings)
    worker = work(settings)  # registered: every batch is popped into its hold (MULTI, SORT ... STORE)
    handled_once(recorder, apps.RESCAN, range(1, 301))
    assert worker.counts["popped"] == 300
    assert env.queue.stats(apps.RESCAN)["acked"] == 300


def test_the_documented_acl_refuses_scripts_and_sorts_that_read_other_keys(acl_redis: RedisSettings) -> None:
    """+sort is for the pop-and-hold's `SORT ... BY nosort LIMIT 0 n STORE`: with a key pattern that is
    not ~*, Redis refuses SORT's BY and GET patterns, which could read keys outside the prefix."""
    client = redis.Redis.from_url(acl_redis.url.get_secret_value(), socket_timeout=5)
    ready = "{" + acl_redis.key_prefix + "}:ready:users"
    try:
        client.rpush(ready, b"1:1")
        for refused in (
            ("EVAL", "while true do end", "0"),
            ("SCRIPT", "LOAD", "return 1"),
            ("FUNCTION", "LIST"),
            ("SORT", ready, "BY", "other:*"),
            ("SORT", ready, "BY", "nosort", "GET", "other:*"),
        ):
            with pytest.raises(redis.ResponseError, match=r"(?i)no permissions|denied"):
                client.execute_command(*refused)
        assert client.execute_command("SORT", ready, "BY", "nosort", "LIMIT", 0, 1) == [b"1:1"]
    finally:
        client.delete(ready)
        client.close()


def test_credentials_revoked_under_a_running_worker_are_one_line_warnings_not_tracebacks(
    make_env: MakeEnv, recorder: apps.Recorder, acl_redis: RedisSettings, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env("rescan", rows=3, name=apps.RESCAN)
    settings = role_settings(env).model_copy(update={"redis": acl_redis})
    dispatch(settings)
    admin = redis.Redis.from_url(env.settings.redis.url.get_secret_value(), socket_timeout=5)
    user = urlsplit(acl_redis.url.get_secret_value()).username
    stop = threading.Event()
    thread = threading.Thread(target=worker_main.serve, args=(settings, stop), daemon=True)
    with caplog.at_level(logging.WARNING, logger="duecast"):
        thread.start()
        try:
            wait_until(lambda: len(recorder.executions(apps.RESCAN)) == 3, "the worker to run its rows")
            admin.execute_command("ACL", "SETUSER", user, "off")  # revoked: its connections are closed
            admin.execute_command("CLIENT", "KILL", "USER", user)
            wait_until(lambda: any("refused the credentials" in r.getMessage() for r in caplog.records), "it")
        finally:
            stop.set()
            thread.join(15)
            admin.close()
    failed = [r for r in caplog.records if getattr(r, "event", None) == "loop.tick_failed"]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in failed), failed[0].getMessage()
    refused = [r.getMessage() for r in failed if "Redis refused the credentials" in r.getMessage()]
    assert refused
    assert "check the password or user in redis.url" in refused[0]
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
