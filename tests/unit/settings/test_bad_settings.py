"""Bad settings refused at start-up with a clear error that never prints a secret (issue 4).

Names carrying SQL, impossible timeout combinations and Redis URLs that would leak or override
(TLS settings that cannot work are in test_bad_settings_tls.py). test_settings.py holds the basics;
this file holds the hostile cases.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from duecast import cli
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, SourceSettings, load_settings
from tests.unit.settings.bad_settings_support import SECRET, _write, everything_printed

USERS = {"name": "users", "table": "users", "due_column": "updated_time", "period_s": 10}


# --- table and column names -----------------------------------------------------------------------

HOSTILE_NAMES = [
    "jobs; DROP TABLE x",
    "jobs`; DROP TABLE x; -- ",
    "x` WHERE 1=1 OR `y",
    "jobs/**/",
    "jobs--",
    "jobs'",
    'jobs"',
    "jobs)",
    "DROP TABLE x",
    "a" * 65,
    "\u202ejobs",  # right-to-left override: renders as a different name
    "jo\u200dbs",  # zero-width joiner
    "\uff4a\uff4f\uff42\uff53",  # fullwidth "jobs"
    "jobs\t",
    "jobs\r\n",
    "jobs\\",
    "@jobs",
    "$jobs",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=repr)
@pytest.mark.parametrize("field", ["table", "id_column", "due_column"])
def test_hostile_source_names_are_refused_from_the_environment(
    field: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DUECAST_MYSQL__PASSWORD", SECRET)
    monkeypatch.setenv("DUECAST_SOURCES", json.dumps([{**USERS, field: name}]))
    with pytest.raises(ValidationError, match="not an allowed SQL identifier") as info:
        load_settings()
    assert f"sources.0.{field}" in str(info.value)  # names the setting...
    assert SECRET not in everything_printed(info.value)  # ...and never a sibling secret


@pytest.mark.parametrize("name", ["jobs`; DROP TABLE x; --", "a" * 65], ids=["backtick", "65-chars"])
def test_hostile_names_are_refused_from_toml(name: str, tmp_path: Path) -> None:
    text = (
        f'[mysql]\npassword = "{SECRET}"\n\n[[sources]]\nname = "users"\n'
        f'table = {json.dumps(name)}\ndue_column = "updated_time"\nperiod_s = 10\n'
    )
    with pytest.raises(ValidationError, match="not an allowed SQL identifier") as info:
        load_settings(_write(tmp_path / "d.toml", text))
    assert SECRET not in everything_printed(info.value)


def test_64_characters_is_the_longest_name() -> None:
    assert SourceSettings(**{**USERS, "table": "t" * 64}).table == "t" * 64
    with pytest.raises(ValidationError):
        SourceSettings(**{**USERS, "table": "t" * 65})


def test_a_name_that_is_not_a_string_is_refused() -> None:
    for value in (12, ["users"], {"users": 1}, None):
        with pytest.raises(ValidationError):
            SourceSettings(**{**USERS, "table": value})


# --- timeouts that cannot work together -----------------------------------------------------------


@pytest.mark.parametrize(("read_s", "lock_s"), [(2, 2), (1, 2), (30, 60)])
def test_read_timeout_must_outlast_the_lock_wait(read_s: float, lock_s: int) -> None:
    """A statement waiting for a row lock must get the server's 1205, not a client-side timeout
    that drops the connection as if the server were dead."""
    with pytest.raises(ValidationError, match=r"read_timeout_s .* must be longer than mysql\.lock_wait_s"):
        MySQLSettings(read_timeout_s=read_s, lock_wait_s=lock_s)
    assert MySQLSettings(read_timeout_s=lock_s + 0.5, lock_wait_s=lock_s).lock_wait_s == lock_s


def test_impossible_timeouts_from_the_environment_never_print_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DUECAST_MYSQL__PASSWORD", SECRET)
    monkeypatch.setenv("DUECAST_MYSQL__READ_TIMEOUT_S", "1")
    monkeypatch.setenv("DUECAST_MYSQL__LOCK_WAIT_S", "5")
    with pytest.raises(ValidationError, match="lock_wait_s") as info:
        load_settings()
    assert SECRET not in everything_printed(info.value)


@pytest.mark.parametrize(("poll_s", "socket_s"), [(5.0, 5.0), (10.0, 5.0), (2.0, 1.0)])
def test_dispatcher_poll_must_be_shorter_than_the_redis_socket_timeout(
    poll_s: float, socket_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DUECAST_REDIS__URL", f"redis://duecast:{SECRET}@cache:6379/0")
    monkeypatch.setenv("DUECAST_DISPATCHER__POLL_INTERVAL_S", str(poll_s))
    monkeypatch.setenv("DUECAST_REDIS__SOCKET_TIMEOUT_S", str(socket_s))
    monkeypatch.setenv("DUECAST_WORKER__BLOCK_TIMEOUT_S", "0.5")
    with pytest.raises(ValidationError, match="poll_interval_s") as info:
        load_settings()
    assert SECRET not in everything_printed(info.value)


@pytest.mark.parametrize(
    "env",
    [
        {"DUECAST_MYSQL__CONNECT_TIMEOUT_S": "0"},
        {"DUECAST_MYSQL__READ_TIMEOUT_S": "-1"},
        {"DUECAST_REDIS__SOCKET_TIMEOUT_S": "nan"},
        {"DUECAST_REDIS__SOCKET_TIMEOUT_S": "inf"},
        {"DUECAST_MYSQL__LOCK_WAIT_S": "0"},
    ],
    ids=lambda env: ",".join(f"{k}={v}" for k, v in env.items()),
)
def test_zero_negative_and_non_finite_timeouts_are_refused(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DUECAST_MYSQL__PASSWORD", SECRET)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        load_settings()
    assert SECRET not in everything_printed(info.value)


# --- Redis URLs -------------------------------------------------------------------------------------

# Each is wrong in a way that, passed to redis-py, would leak part of the password in its error
# ("Port could not be cast to integer value as '<password start>'"), silently use another host or
# database, or turn certificate checks off from inside the URL.
BAD_URLS = {
    "slash-in-password": (f"redis://duecast:{SECRET}/x@cache:6379/0", "not a valid URL"),
    "hash-in-password": (f"redis://duecast:{SECRET}#x@cache:6379/0", "not a valid URL"),
    "question-mark-in-password": (f"redis://duecast:{SECRET}?x@cache:6379/0", "not a valid URL"),
    "port-not-a-number": (f"redis://duecast:{SECRET}@cache:six/0", "not a valid URL"),
    "port-out-of-range": (f"redis://duecast:{SECRET}@cache:70000/0", "not a valid URL"),
    "no-scheme": (f"duecast:{SECRET}@cache:6379/0", "must start with"),
    "http": (f"http://duecast:{SECRET}@cache:6379/0", "must start with"),
    "no-host": (f"redis://duecast:{SECRET}@:6379/0", "names no host"),
    "db-not-a-number": (f"redis://duecast:{SECRET}@cache:6379/O", "database number"),
    "db-unicode-digit": (f"redis://duecast:{SECRET}@cache:6379/\u0661", "database number"),
    "verify-off-in-query": (f"rediss://duecast:{SECRET}@cache:6380/0?ssl_cert_reqs=none", "no ?option"),
    "hostname-off-in-query": (
        f"rediss://duecast:{SECRET}@cache:6380/0?ssl_check_hostname=false",
        "no ?option",
    ),
    "fragment": (f"redis://duecast:{SECRET}@cache:6379/0#{SECRET}", "no #fragment"),
}


@pytest.mark.parametrize("case", BAD_URLS.values(), ids=BAD_URLS.keys())
def test_bad_redis_urls_are_refused_without_quoting_them(
    case: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, message = case
    monkeypatch.setenv("DUECAST_REDIS__URL", url)
    with pytest.raises(ValidationError, match=re.escape(message)) as info:
        load_settings()
    printed = everything_printed(info.value)
    assert "redis.url" in printed
    assert SECRET not in printed
    assert SECRET[:4] not in printed  # not even the start of it


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://cache",
        f"redis://:{SECRET}@cache:6379/0",
        f"redis://duecast:{SECRET}@cache:6379/15",
        "redis://duecast:p%2Fa%3Fs%23s%40w%3Ard@cache:6379/0",  # percent-encoded / ? # @ :
        f"rediss://duecast:{SECRET}@cache.internal:6380/0",
        "redis://[::1]:6379/0",
        "redis://cache:6379/0?db=3",
        "unix:///run/redis/redis.sock",
        "unix:///run/redis/redis.sock?db=2",
    ],
)
def test_good_redis_urls_are_accepted(url: str) -> None:
    assert RedisSettings(url=url).url.get_secret_value() == url


def test_a_percent_encoded_password_reaches_redis_decoded() -> None:
    client = connect_redis(RedisSettings(url="redis://duecast:p%2Fa%3Fs%23s%40w%3Ard@cache:6379/0"))
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["host"]) == ("duecast", "p/a?s#s@w:rd", "cache")


def test_the_cli_reports_a_bad_url_as_invalid_settings_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DUECAST_REDIS__URL", f"redis://duecast:{SECRET}/x@cache:6379/0")
    assert cli.main(["status"]) == 2
    out, err = capsys.readouterr()
    assert "duecast status: invalid settings" in err
    assert "redis.url" in err
    assert SECRET[:4] not in out + err
