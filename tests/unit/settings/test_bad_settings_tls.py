"""Hostile and impossible TLS settings for MySQL and Redis, and secrets kept out of TLS errors and logs."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, load_settings
from duecast.shared.storage.db import tls_context
from tests.unit.settings.bad_settings_support import SECRET, _write, everything_printed

# --- TLS settings -----------------------------------------------------------------------------------


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    """A file that exists (these checks run before any certificate is parsed)."""
    return _write(tmp_path / "x.pem", "not parsed by the settings\n")


@pytest.mark.parametrize("field", ["tls_ca_file", "tls_cert_file", "tls_key_file"])
def test_a_missing_tls_file_is_named_at_start_up(field: str, tmp_path: Path, pem: Path) -> None:
    missing = tmp_path / "nope" / f"{field}.pem"
    cert = {"tls_cert_file": pem} if field == "tls_key_file" else {}
    with pytest.raises(ValidationError, match=f"mysql.{field}: no such file: .*nope") as info:
        MySQLSettings(tls=True, password=SECRET, **{**cert, field: missing})
    assert SECRET not in everything_printed(info.value)
    with pytest.raises(ValidationError, match=f"redis.{field}: no such file") as info:
        RedisSettings(url=f"rediss://u:{SECRET}@cache:6380/0", **{**cert, field: missing})
    assert SECRET not in everything_printed(info.value)


def test_a_key_without_its_certificate_is_refused(pem: Path) -> None:
    with pytest.raises(ValidationError, match=r"tls_key_file is set without mysql\.tls_cert_file"):
        MySQLSettings(tls=True, tls_key_file=pem)
    with pytest.raises(ValidationError, match=r"tls_key_file is set without redis\.tls_cert_file"):
        RedisSettings(url="rediss://cache:6380/0", tls_key_file=pem)


def test_tls_files_without_tls_are_refused_rather_than_ignored(pem: Path) -> None:
    """A CA file next to a plaintext connection means someone believes it is encrypted."""
    with pytest.raises(ValidationError, match=r"set mysql\.tls = true"):
        MySQLSettings(tls_ca_file=pem)
    with pytest.raises(ValidationError, match=r"redis\.url is not rediss://") as info:
        RedisSettings(url=f"redis://u:{SECRET}@cache:6379/0", tls_ca_file=pem)
    assert SECRET not in everything_printed(info.value)


def test_tls_settings_from_toml(tmp_path: Path, pem: Path) -> None:
    text = f"""
[mysql]
tls = true
tls_ca_file = "{pem}"
tls_check_hostname = false

[redis]
url = "rediss://duecast:{SECRET}@cache.internal:6380/0"
tls_ca_file = "{pem}"
tls_cert_file = "{pem}"
"""
    s = load_settings(_write(tmp_path / "tls.toml", text))
    assert (s.mysql.tls, s.mysql.tls_ca_file, s.mysql.tls_verify, s.mysql.tls_check_hostname) == (
        True,
        pem,
        True,
        False,
    )
    assert s.redis.tls
    assert (s.redis.tls_ca_file, s.redis.tls_cert_file, s.redis.tls_verify) == (pem, pem, True)
    assert SECRET not in repr(s) + str(s) + s.model_dump_json()


# --- what the clients are given ---------------------------------------------------------------------


def _kwargs(settings: RedisSettings) -> dict[str, Any]:
    return dict(connect_redis(settings).connection_pool.connection_kwargs)


def test_rediss_verifies_the_certificate_and_host_name_by_default(pem: Path) -> None:
    client = connect_redis(RedisSettings(url="rediss://cache:6380/0", tls_ca_file=pem))
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_cert_reqs"] == "required"
    assert kwargs["ssl_check_hostname"] is True
    assert kwargs["ssl_ca_certs"] == str(pem)


def test_plain_redis_urls_get_no_tls_arguments() -> None:
    client = connect_redis(RedisSettings(url="redis://cache:6379/0"))
    assert client.connection_pool.connection_class.__name__ == "Connection"
    assert not any(k.startswith("ssl") for k in client.connection_pool.connection_kwargs)


def test_redis_verification_off_is_explicit_and_logged_without_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        kwargs = _kwargs(RedisSettings(url=f"rediss://u:{SECRET}@cache:6380/0", tls_verify=False))
    assert (kwargs["ssl_cert_reqs"], kwargs["ssl_check_hostname"]) == ("none", False)
    assert "redis.tls_verify is false" in caplog.text
    assert SECRET not in caplog.text


def test_redis_host_name_check_can_be_turned_off_alone() -> None:
    kwargs = _kwargs(RedisSettings(url="rediss://cache:6380/0", tls_check_hostname=False))
    assert (kwargs["ssl_cert_reqs"], kwargs["ssl_check_hostname"]) == ("required", False)


def test_redis_client_reprs_never_show_the_password() -> None:
    client = connect_redis(RedisSettings(url=f"rediss://duecast:{SECRET}@cache:6380/0"))
    for text in (repr(client), str(client), repr(client.connection_pool), str(client.connection_pool)):
        assert SECRET not in text


def test_mysql_tls_context_verifies_by_default() -> None:
    ctx = tls_context(MySQLSettings(tls=True))
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_mysql_tls_context_without_host_name_check() -> None:
    ctx = tls_context(MySQLSettings(tls=True, tls_check_hostname=False))
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_REQUIRED, False)


def test_mysql_verification_off_is_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ctx = tls_context(MySQLSettings(tls=True, tls_verify=False, password=SECRET))
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_NONE, False)
    assert "mysql.tls_verify is false" in caplog.text
    assert SECRET not in caplog.text


def test_mysql_tls_off_by_default() -> None:
    settings = Settings().mysql
    assert (settings.tls, settings.tls_verify, settings.tls_check_hostname) == (False, True, True)
