"""The whole settings model, checked across sections, and `load_settings` (environment over TOML)."""

from __future__ import annotations

import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Literal, Self

from pydantic import model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ..errors import DuecastError
from ..policy import keeper_fits, lease_timing, shortest_lease_s
from .roles import (
    DispatcherSettings,
    HealthSettings,
    WebSettings,
    WorkerSettings,
)
from .servers import MySQLSettings, RedisSettings
from .sources import (
    JOBS_SOURCE,
    JobsSettings,
    SourceSettings,
)
from .topics import TopicsSettings

_toml_path: ContextVar[Path | None] = ContextVar("duecast_toml_path", default=None)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="DUECAST_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )

    mysql: MySQLSettings = MySQLSettings()
    redis: RedisSettings = RedisSettings()
    sources: list[SourceSettings] = []
    jobs: JobsSettings = JobsSettings()
    topics: TopicsSettings = TopicsSettings()
    dispatcher: DispatcherSettings = DispatcherSettings()
    worker: WorkerSettings = WorkerSettings()
    health: HealthSettings = HealthSettings()
    web: WebSettings = WebSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # "json": one object per line with a stable `event` name (docs/observability.md#logs).
    log_format: Literal["human", "json"] = "human"

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.worker.block_timeout_s >= self.redis.socket_timeout_s:
            raise ValueError(
                f"worker.block_timeout_s ({self.worker.block_timeout_s}) must be shorter than "
                f"redis.socket_timeout_s ({self.redis.socket_timeout_s}), or every idle pop "
                "would look like a dead server"
            )
        if self.dispatcher.poll_interval_s >= self.redis.socket_timeout_s:
            raise ValueError(
                f"dispatcher.poll_interval_s ({self.dispatcher.poll_interval_s}) must be shorter than "
                f"redis.socket_timeout_s ({self.redis.socket_timeout_s}): the dispatcher waits for "
                "wake-ups with a blocking pop that long"
            )
        if any(s.name == JOBS_SOURCE for s in self.sources):
            raise ValueError(f"source name {JOBS_SOURCE!r} is reserved for the jobs table's queues")
        dotted = [s.name for s in self.sources if "." in s.name]
        if dotted:
            raise ValueError(f"source names may not contain '.' (kept for job queues): {', '.join(dotted)}")
        unknown = [q for q in self.worker.queues if q not in self.jobs.queues]
        if unknown:
            raise ValueError(
                f"worker.queues names {', '.join(unknown)}, "
                f"not in jobs.queues ({', '.join(self.jobs.queues)})"
            )
        names = [s.name for s in self.all_sources()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"source names must be unique; repeated: {', '.join(dupes)}")
        problem = self._lease_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def _lease_problem(self) -> str | None:
        """A lease its keeper could not renew in time (shared/storage/leased/keeper.py). Renewals run
        every lease/3 and the worker stops itself at 0.8 of the lease without one, so the first renewal,
        even if its connection stalls once connecting and once reading, must end before that."""
        used = [("jobs.lease_s", self.jobs.lease_s)] if self.jobs.enabled else []
        if self.topics.group_sources():
            used.append(("topics.lease_s", self.topics.lease_s))
        used += [(f"lease_s of source {s.name}", s.lease_s) for s in self.sources]
        timeout_s = self.mysql.lease_keeper_timeout_s
        for name, lease_s in used:
            if not keeper_fits(lease_s, timeout_s):
                timing = lease_timing(lease_s)
                return (
                    f"{name} ({lease_s}) is too short for mysql.lease_keeper_timeout_s ({timeout_s}): "
                    f"a renewal starts {timing.renew_s:.2f}s after the last one and may stall "
                    f"{2 * timeout_s:.2f}s (connect, then read) before it is retried, but the worker "
                    f"stops itself {timing.fence_s:.2f}s after the last renewal (0.8 of the lease); "
                    f"make {name} longer than {shortest_lease_s(timeout_s):.2f}s or "
                    "mysql.lease_keeper_timeout_s shorter"
                )
        return None

    def all_sources(self) -> list[SourceSettings]:
        """Configured sources, plus the built-in jobs source when enabled, and topics' cluster groups."""
        extra = self.jobs.queue_sources() if self.jobs.enabled else []
        return [*self.sources, *extra, *self.topics.group_sources()]

    def source(self, name: str) -> SourceSettings:
        for s in self.all_sources():
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.all_sources()) or "none"
        raise KeyError(f"no source named {name!r} (configured: {known})")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = _toml_path.get()
        chain: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml is not None:
            chain.append(TomlConfigSettingsSource(settings_cls, toml_file=toml))
        return tuple(chain)


class SettingsFileError(DuecastError, ValueError):
    """The settings file cannot be read as TOML; the message names the file and where it is wrong."""


def load_settings(config: str | Path | None = None) -> Settings:
    """Build settings from the environment over the TOML file named by `config` or DUECAST_CONFIG."""
    raw = config if config is not None else os.environ.get("DUECAST_CONFIG")
    path = Path(raw) if raw else None
    if path is not None and path.is_dir():
        raise FileNotFoundError(
            f"settings file {path} is a directory; name a TOML file (--config or DUECAST_CONFIG)"
        )
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"settings file {path} does not exist")
    if path is not None:
        _check_toml(path)
    token = _toml_path.set(path)
    try:
        return Settings()
    finally:
        _toml_path.reset(token)


def _check_toml(path: Path) -> None:
    """Read the file once before pydantic-settings does, so a broken one is one line, not a traceback."""
    try:
        tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise SettingsFileError(f"settings file {path} cannot be read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise SettingsFileError(
            f"settings file {path} is not UTF-8 text (byte {exc.start}); TOML files are UTF-8"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsFileError(f"settings file {path} is not valid TOML: {exc}") from exc
