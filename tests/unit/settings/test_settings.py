"""Settings (shared/settings.py): sources of values, cross-field rules, secrets
(identifier allow-listing is in test_settings_identifiers.py).

The autouse fixture in conftest.py removes every outer DUECAST_* variable, so each test sees only
what it sets itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from duecast.shared.process.failures import EXIT_CONFIG, explain
from duecast.shared.settings import (
    JOBS_SOURCE,
    MySQLSettings,
    Settings,
    SourceSettings,
    load_settings,
)
from tests.unit.settings.settings_support import USERS, _source

PASSWORD = "hunter2-Zq9!"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- where values come from -------------------------------------------------------------------------


def test_defaults_load_without_any_environment() -> None:
    s = load_settings()
    assert s.mysql.port == 3306
    assert s.mysql.database == "duecast"
    assert s.redis.key_prefix == "duecast"
    assert s.sources == []
    assert [src.name for src in s.all_sources()] == [f"{JOBS_SOURCE}.default"]
    jobs = s.source(f"{JOBS_SOURCE}.default")
    assert (jobs.table, jobs.due_column, jobs.on_success, jobs.period_s) == (
        "duecast_jobs",
        "run_at",
        "delete",
        0,
    )
    assert s.worker.block_timeout_s < s.redis.socket_timeout_s


def test_env_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_MYSQL__PORT", "3307")
    monkeypatch.setenv("DUECAST_MYSQL__HOST", "db.internal")
    monkeypatch.setenv("DUECAST_WORKER__CONCURRENCY", "8")
    monkeypatch.setenv("DUECAST_LOG_LEVEL", "DEBUG")
    s = load_settings()
    assert (s.mysql.port, s.mysql.host) == (3307, "db.internal")
    assert s.mysql.user == "root"  # untouched siblings keep their defaults
    assert s.worker.concurrency == 8
    assert s.log_level == "DEBUG"


def test_env_names_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("duecast_mysql__port", "3309")
    assert load_settings().mysql.port == 3309


def test_sources_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    other = {"name": "orders", "table": "orders", "due_column": "due_at", "on_success": "delete"}
    monkeypatch.setenv("DUECAST_SOURCES", json.dumps([USERS, other]))
    s = load_settings()
    assert [src.name for src in s.all_sources()] == ["users", "orders", f"{JOBS_SOURCE}.default"]
    assert s.source("users").period_s == 10.0
    assert s.source("orders").on_success == "delete"


def test_unknown_source_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="users"):
        Settings(sources=[SourceSettings(**USERS)]).source("nope")


def test_jobs_can_be_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_JOBS__ENABLED", "false")
    assert load_settings().all_sources() == []


TOML = """
log_level = "WARNING"

[mysql]
host = "toml-host"
port = 3310

[worker]
concurrency = 4

[[sources]]
name = "users"
table = "users"
due_column = "updated_time"
period_s = 30
"""


def test_toml_file_by_path(tmp_path: Path) -> None:
    s = load_settings(_write(tmp_path / "duecast.toml", TOML))
    assert (s.mysql.host, s.mysql.port, s.worker.concurrency, s.log_level) == (
        "toml-host",
        3310,
        4,
        "WARNING",
    )
    assert s.source("users").period_s == 30.0


def test_toml_path_given_as_str(tmp_path: Path) -> None:
    assert load_settings(str(_write(tmp_path / "d.toml", TOML))).mysql.port == 3310


def test_toml_file_from_duecast_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_CONFIG", str(_write(tmp_path / "duecast.toml", TOML)))
    assert load_settings().mysql.host == "toml-host"


def test_explicit_path_wins_over_duecast_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_CONFIG", str(_write(tmp_path / "env.toml", '[mysql]\nhost = "from-env"\n')))
    assert (
        load_settings(_write(tmp_path / "arg.toml", '[mysql]\nhost = "from-arg"\n')).mysql.host == "from-arg"
    )


def test_env_overrides_toml_field_by_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_MYSQL__PORT", "3311")
    s = load_settings(_write(tmp_path / "duecast.toml", TOML))
    assert s.mysql.port == 3311  # env wins...
    assert s.mysql.host == "toml-host"  # ...without erasing the file's other keys in that section
    assert s.worker.concurrency == 4


def test_toml_is_not_sticky_between_loads(tmp_path: Path) -> None:
    load_settings(_write(tmp_path / "duecast.toml", TOML))
    assert load_settings().mysql.host == "127.0.0.1"
    assert Settings().mysql.host == "127.0.0.1"


def test_missing_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.toml"):
        load_settings(tmp_path / "nope.toml")
    monkeypatch.setenv("DUECAST_CONFIG", str(tmp_path / "also-nope.toml"))
    with pytest.raises(FileNotFoundError, match=r"also-nope\.toml"):
        load_settings()


def test_a_directory_is_not_a_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="is a directory"):
        load_settings(tmp_path)
    monkeypatch.setenv("DUECAST_CONFIG", str(tmp_path))  # said "does not exist" before
    with pytest.raises(FileNotFoundError) as caught:
        load_settings()
    problem = explain(caught.value)
    assert problem is not None
    assert (
        str(problem)
        == f"settings file {tmp_path} is a directory; name a TOML file (--config or DUECAST_CONFIG)"
    )
    assert problem.code == EXIT_CONFIG


def test_unknown_keys_are_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match=r"mysql\.hots"):
        load_settings(_write(tmp_path / "typo.toml", '[mysql]\nhots = "x"\n'))
    monkeypatch.setenv("DUECAST_WORKER__CONCURENCY", "3")
    with pytest.raises(ValidationError, match="concurency"):
        load_settings()


# --- cross-field rules ------------------------------------------------------------------------------


def test_claim_batch_above_high_water_rejected() -> None:
    with pytest.raises(ValidationError, match="claim_batch"):
        _source(claim_batch=500, high_water=499)
    assert _source(claim_batch=500, high_water=500).claim_batch == 500


def test_touch_with_zero_period_rejected() -> None:
    with pytest.raises(ValidationError, match="period_s"):
        _source(period_s=0, on_success="touch")
    assert _source(period_s=0, on_success="delete").period_s == 0


@pytest.mark.parametrize(("block_s", "socket_s"), [(1.0, 1.0), (2.0, 1.5), (1.0, 0.5)])
def test_block_timeout_must_be_shorter_than_socket_timeout(block_s: float, socket_s: float) -> None:
    with pytest.raises(ValidationError, match="block_timeout_s"):
        Settings(worker={"block_timeout_s": block_s}, redis={"socket_timeout_s": socket_s})


def test_block_timeout_just_below_socket_timeout_accepted() -> None:
    s = Settings(worker={"block_timeout_s": 1.0}, redis={"socket_timeout_s": 1.01})
    assert s.worker.block_timeout_s == 1.0


@pytest.mark.parametrize("block_s", ["0", "0.0", "-1", "2.5"])
def test_block_timeout_zero_or_out_of_range_rejected(block_s: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """BLMPOP with timeout 0 blocks forever: the loop would never see a stop request."""
    monkeypatch.setenv("DUECAST_WORKER__BLOCK_TIMEOUT_S", block_s)
    with pytest.raises(ValidationError, match="block_timeout_s"):
        load_settings()


def test_each_job_queue_is_a_source_in_order() -> None:
    s = Settings(jobs={"queues": ["critical", "default", "bulk"]})  # type: ignore[arg-type]
    assert [src.name for src in s.all_sources()] == ["jobs.critical", "jobs.default", "jobs.bulk"]
    assert {src.table for src in s.all_sources()} == {"duecast_jobs"}
    with pytest.raises(ValidationError, match="repeats critical"):
        Settings(jobs={"queues": ["critical", "critical"]})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"not in jobs\.queues"):
        Settings(jobs={"queues": ["a"]}, worker={"queues": ["b"]})  # type: ignore[arg-type]


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(ValidationError):
        s.log_level = "DEBUG"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        s.mysql.port = 1  # type: ignore[misc]


# --- secrets ----------------------------------------------------------------------------------------


def test_password_is_hidden_in_repr_str_and_json() -> None:
    s = Settings(
        mysql={"password": PASSWORD},
        redis={"url": f"redis://:{PASSWORD}@cache:6379/0"},
    )
    assert s.mysql.password.get_secret_value() == PASSWORD  # still usable where it is needed
    assert PASSWORD in s.redis.url.get_secret_value()
    for text in (repr(s), str(s), repr(s.mysql), str(s.redis), s.model_dump_json(), repr(s.model_dump())):
        assert PASSWORD not in text


def _validation_text(exc: BaseException) -> str:
    """Everything a log line or the CLI could print from the error, cause chain included."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


@pytest.mark.parametrize(
    "env",
    [
        {"DUECAST_MYSQL__PASSWORD": PASSWORD, "DUECAST_MYSQL__PORT": "0"},  # a sibling is invalid
        {"DUECAST_MYSQL__PASSWROD": PASSWORD},  # the password's own key is misspelt
        {"DUECAST_MYSQL": json.dumps({"password": PASSWORD, "port": "x"})},
        {"DUECAST_REDIS__URL": f"redis://:{PASSWORD}@h:1/0", "DUECAST_REDIS__KEY_PREFIX": "bad prefix"},
        {"DUECAST_REDIS__URL": f"redis://:{PASSWORD}@h:1/0", "DUECAST_REDIS__SOCKET_TIMEOUT_S": "0.5"},
        {"DUECAST_REDIS__URLL": f"redis://:{PASSWORD}@h:1/0"},
    ],
    ids=["sibling", "typo-key", "json-section", "redis-prefix", "cross-field", "redis-typo"],
)
def test_password_never_in_validation_errors(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        load_settings()
    assert PASSWORD not in _validation_text(info.value)


def test_password_never_in_errors_from_toml(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.toml", f'[mysql]\npasword = "{PASSWORD}"\nport = 99999\n')
    with pytest.raises(ValidationError) as info:
        load_settings(path)
    assert PASSWORD not in _validation_text(info.value)


def test_password_of_wrong_type_not_echoed() -> None:
    with pytest.raises(ValidationError) as info:
        MySQLSettings(password=12345678)
    assert "12345678" not in _validation_text(info.value)


def test_a_worker_serves_job_queues_in_its_stated_order() -> None:
    from duecast.shared.process.failures import StartupError  # noqa: PLC0415
    from duecast.worker.main import served_sources  # noqa: PLC0415 - the worker's wiring, tested pure

    s = Settings(jobs={"queues": ["a", "b", "c"]}, worker={"queues": ["c", "a"]})  # type: ignore[arg-type]
    assert served_sources(s, ["jobs"]) == ["jobs.c", "jobs.a"]
    assert served_sources(s, ["jobs", "users"]) == ["jobs.c", "jobs.a"]  # users: not configured (warned)
    s = Settings(jobs={"queues": ["a", "b"]})  # type: ignore[arg-type]
    assert served_sources(s, ["jobs"]) == ["jobs.a", "jobs.b"]
    bad = s.model_copy(update={"worker": s.worker.model_copy(update={"queues": ["zzz"]})})
    with pytest.raises(StartupError, match=r"worker\.queues names zzz, not in jobs\.queues"):
        served_sources(bad, ["jobs"])
