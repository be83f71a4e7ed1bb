"""Every setting of every role, validated once at start-up (pydantic-settings).

Sources: `DUECAST_*` environment variables (nested with `__`) over an optional TOML file. Secrets are
`SecretStr` and input values are never echoed in validation errors.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from shared.identifiers import check_identifier
from shared.policy import keeper_fits, lease_timing, shortest_lease_s

Identifier = Annotated[str, AfterValidator(check_identifier)]

JOBS_SOURCE = "jobs"
_toml_path: ContextVar[Path | None] = ContextVar("duecast_toml_path", default=None)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class MySQLSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str = "root"
    password: SecretStr = SecretStr("")
    database: Identifier = "duecast"
    unix_socket: str | None = None
    connect_timeout_s: float = Field(5.0, gt=0, le=60)
    read_timeout_s: float = Field(30.0, gt=0, le=3600)
    lock_wait_s: int = Field(2, ge=1, le=60)  # innodb_lock_wait_timeout for duecast's sessions
    # Connect and read timeout of the lease keepers' own connections (jobs, topic messages): a
    # renewal that stalls is cut off and tried again on a new connection, well inside the lease
    # (jobs.lease_s must exceed about 4.3 times this; see docs/reliability.md). Never waits for locks.
    lease_keeper_timeout_s: float = Field(2.0, gt=0, le=60)
    # TLS (docs/security.md). `tls = true` requires it: a server without TLS is refused, never
    # used in plaintext. The server's certificate is checked against tls_ca_file (default: the
    # system's CAs) and its name against `host`.
    tls: bool = False
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None  # client certificate, for accounts that REQUIRE X509
    tls_key_file: Path | None = None  # its private key, unless tls_cert_file holds both
    tls_verify: bool = True  # false: encrypted but unauthenticated (logged as a warning)
    tls_check_hostname: bool = True  # false: any certificate tls_ca_file signed (VERIFY_CA)

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.read_timeout_s <= self.lock_wait_s:
            raise ValueError(
                f"mysql.read_timeout_s ({self.read_timeout_s}) must be longer than mysql.lock_wait_s "
                f"({self.lock_wait_s}), or a statement waiting for a row lock would be cut off as if "
                "the server were dead"
            )
        files = (self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        if not self.tls and any(files):
            raise ValueError("mysql.tls_* files are set but mysql.tls is false; set mysql.tls = true")
        self.check_tls_files("mysql", *files)
        return self

    @staticmethod
    def check_tls_files(section: str, ca: Path | None, cert: Path | None, key: Path | None) -> None:
        """Refuse at start-up what would fail at the first connection (paths are not secrets)."""
        for name, path in (("tls_ca_file", ca), ("tls_cert_file", cert), ("tls_key_file", key)):
            if path is not None and not path.is_file():
                raise ValueError(f"{section}.{name}: no such file: {path}")
        if key is not None and cert is None:
            raise ValueError(f"{section}.tls_key_file is set without {section}.tls_cert_file")


class RedisSettings(_Section):
    # redis://[user:password@]host:port/db, rediss://... for TLS, or unix:///path?db=0. It may
    # carry an ACL user and password: errors about it never quote it. No other ?options: one
    # there would override these settings (e.g. ssl_cert_reqs=none).
    url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    key_prefix: str = Field("duecast", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    socket_timeout_s: float = Field(5.0, gt=0, le=60)
    # TLS, for rediss:// URLs (docs/security.md): the server's certificate is checked against
    # tls_ca_file (default: the system's CAs) and its name against the URL's host.
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None  # client certificate, when the server has tls-auth-clients on
    tls_key_file: Path | None = None  # its private key, unless tls_cert_file holds both
    tls_verify: bool = True  # false: encrypted but unauthenticated (logged as a warning)
    tls_check_hostname: bool = True  # false: any certificate tls_ca_file signed
    # High availability (deploy/README.md): either Sentinels ("host:port" each) that know the master
    # named sentinel_service, the url then giving only user, password, db and redis:// or rediss://;
    # or cluster = true, the url naming any one node (database 0 only).
    sentinels: list[str] = Field(default_factory=list, max_length=16)
    sentinel_service: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    cluster: bool = False

    @property
    def tls(self) -> bool:
        return self.url.get_secret_value().startswith("rediss://")

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """The Sentinels as (host, port), already checked by the validator."""
        return [(host, int(port)) for host, _, port in (s.rpartition(":") for s in self.sentinels)]

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        problem = self._url_problem(self.url.get_secret_value())
        if problem is not None:  # raised outside any except: no chained error can quote the URL
            raise ValueError(f"redis.url {problem} (the URL is not shown: it may hold a password)")
        files = (self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        if not self.tls and any(files):
            raise ValueError("redis.tls_* files are set but redis.url is not rediss://")
        MySQLSettings.check_tls_files("redis", *files)
        problem = self._topology_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def _topology_problem(self) -> str | None:
        """What is wrong with the sentinel / cluster settings (none of them is secret)."""
        if bool(self.sentinels) != (self.sentinel_service is not None):
            return "redis.sentinels and redis.sentinel_service must be set together"
        if self.sentinels and self.cluster:
            return "redis.sentinels and redis.cluster = true exclude each other"
        if (self.sentinels or self.cluster) and self.url.get_secret_value().startswith("unix://"):
            return "redis.sentinels and redis.cluster need a redis:// or rediss:// url"
        for address in self.sentinels:
            host, _, port = address.rpartition(":")
            if not host or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
                return f"redis.sentinels entry {address!r} is not host:port"
        from urllib.parse import urlsplit  # noqa: PLC0415 - as in _url_problem, which checked it parses

        if self.cluster and urlsplit(self.url.get_secret_value()).path.strip("/") not in {"", "0"}:
            return "redis.cluster = true needs database 0 (Redis Cluster has no other)"
        return None

    @staticmethod
    def _url_problem(url: str) -> str | None:
        """What is wrong with `url`, in words that never contain any part of it."""
        from urllib.parse import parse_qs, urlsplit  # noqa: PLC0415 - only this check parses URLs

        scheme, sep, _ = url.partition("://")
        if not sep or scheme not in {"redis", "rediss", "unix"}:
            return "must start with redis://, rediss:// or unix://"
        try:
            parts = urlsplit(url)
            query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
            bad = parts.port == -1  # reading .port parses it: a stray / ? # in a password fails here
        except ValueError:
            bad = True
        if bad:
            return "is not a valid URL: check the port, and percent-encode / ? # @ : in a password"
        if parts.fragment or set(query) - {"db"}:
            return "may carry no #fragment and no ?option but db: use the [redis] settings"
        if scheme != "unix" and not parts.hostname:
            return "names no host"
        # redis-py silently uses database 0 when it cannot read the number.
        db = query["db"][0] if "db" in query else "" if scheme == "unix" else parts.path.strip("/")
        if db and not (db.isascii() and db.isdigit()):
            return "names no valid database number (redis://host:6379/0)"
        return None


class SourceSettings(_Section):
    """One table duecast dispatches from, and how a row of it becomes due."""

    # A job queue's source is `jobs.<queue>`; configured sources may not use a dot (checked in Settings).
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,47}(\.[a-z0-9][a-z0-9_-]{0,47})?$")
    table: Identifier
    id_column: Identifier = "id"
    due_column: Identifier
    # A row is due when due_column <= NOW(6) - period_s. A re-scan source (check every 10 s) sets
    # the period; a `due_at` style column uses 0.
    period_s: float = Field(0.0, ge=0, le=366 * 86400)
    # What a handler's plain success does: "touch" sets due_column = NOW(6) (re-scan);
    # "delete" removes the row (one-off work).
    on_success: Literal["touch", "delete"] = "touch"
    claim_batch: int = Field(2000, ge=1, le=10_000)
    high_water: int = Field(40_000, ge=1, le=10_000_000)
    visibility_timeout_s: float = Field(60.0, ge=1, le=86400)
    # "rows": dispatch state in each row (dc_* columns): per-row due times, two row writes per
    # check. "ranges": dispatch state per span of `range_size` ids in duecast's own
    # dc_ranges_<name> table; a business row is written only when its handler changes it.
    # For re-scan sources (period_s > 0). claim_batch and high_water still count rows.
    mode: Literal["rows", "ranges"] = "rows"
    range_size: int = Field(1000, ge=1, le=100_000)

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.mode == "ranges" and (self.period_s == 0 or self.on_success != "touch"):
            raise ValueError(
                f"source {self.name}: mode='ranges' is for re-scan sources: it needs period_s > 0 "
                "and on_success='touch'"
            )
        if self.claim_batch > self.high_water:
            raise ValueError(
                f"source {self.name}: claim_batch ({self.claim_batch}) must be <= high_water "
                f"({self.high_water}), or the dispatcher could never claim a full batch"
            )
        if self.on_success == "touch" and self.period_s == 0:
            raise ValueError(
                f"source {self.name}: on_success='touch' with period_s=0 would make every row due "
                "again at once; set period_s > 0 or on_success='delete'"
            )
        return self


QueueName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,47}$")]


class ScheduleSettings(_Section):
    """A recurring job: one job of `task` per fire time of `cron` or `every_s` (second granularity)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
    task: str = Field(min_length=1, max_length=191)
    # Five fields (minute hour day month weekday) or six with seconds first; APScheduler's syntax.
    cron: str | None = None
    every_s: float | None = Field(None, ge=1, le=366 * 86400)
    timezone: str = "UTC"  # the zone cron fields are read in
    payload: Any = None
    queue: QueueName = "default"
    priority: int = Field(0, ge=0, le=9)
    # After downtime: "coalesce" runs the latest missed time once, "all" runs every missed time
    # (at most jobs.schedule_backfill_max), "skip" runs none and waits for the next one.
    missed: Literal["coalesce", "all", "skip"] = "coalesce"

    @model_validator(mode="after")
    def _one_trigger(self) -> Self:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError(f"schedule {self.name}: set exactly one of cron and every_s")
        return self


class JobsSettings(_Section):
    """duecast's own one-off jobs table: each queue is dispatched like a source of its own."""

    enabled: bool = True
    table: Identifier = "duecast_jobs"
    schedules_table: Identifier = "duecast_schedules"
    # Jobs go to one of these queues (enqueueing to another is an error); each gets its own ready
    # list, and workers serve the queues in worker.queues order (default: this order).
    queues: list[QueueName] = Field(default_factory=lambda: ["default"], min_length=1)
    max_payload_bytes: int = Field(65_536, ge=16, le=16 * 1024 * 1024)  # JSON text, UTF-8
    max_attempts: int = Field(20, ge=1, le=10_000)  # default per job: failed runs before dead
    max_interruptions: int = Field(3, ge=1, le=1000)  # runs whose worker died, before dead
    retry_base_s: float = Field(2.0, gt=0, le=86400)  # backoff after the first failure...
    retry_cap_s: float = Field(3600.0, gt=0, le=30 * 86400)  # ...doubling up to this, with jitter
    # A RUNNING job's lease: its worker extends it every lease_s/3 while the handler runs, and exits
    # without acking if it could not for 0.8 of it (self-fencing); a job whose lease ran out was
    # interrupted (its worker died) and is run again, or dead after max_interruptions.
    lease_s: float = Field(15.0, ge=2, le=86400)
    # A worker batch still running after this long is hung: the worker stops extending its leases
    # and exits (a supervisor restarts it), so its jobs are interrupted and run again elsewhere; a
    # job that always hangs is dead after max_interruptions. Python cannot kill a hung thread.
    timeout_s: float = Field(1800.0, ge=1, le=7 * 86400)
    retention_s: float = Field(0.0, ge=0, le=366 * 86400)  # keep done jobs this long; 0 = delete at once
    dead_retention_s: float = Field(30 * 86400.0, ge=0, le=10 * 366 * 86400)  # 0 = keep dead jobs forever
    prune_interval_s: float = Field(60.0, gt=0, le=86400)
    prune_batch: int = Field(5000, ge=1, le=100_000)
    schedules: list[ScheduleSettings] = []
    schedule_backfill_max: int = Field(100, ge=1, le=100_000)
    claim_batch: int = Field(2000, ge=1, le=10_000)
    high_water: int = Field(40_000, ge=1, le=10_000_000)
    visibility_timeout_s: float = Field(60.0, ge=1, le=86400)  # dispatched but never started

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        dupes = sorted({q for q in self.queues if self.queues.count(q) > 1})
        if dupes:
            raise ValueError(f"jobs.queues repeats {', '.join(dupes)}")
        names = [s.name for s in self.schedules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"jobs.schedules: names must be unique; repeated: {', '.join(dupes)}")
        for sched in self.schedules:
            if sched.queue not in self.queues:
                raise ValueError(
                    f"schedule {sched.name}: queue {sched.queue!r} is not in jobs.queues "
                    f"({', '.join(self.queues)})"
                )
        if self.timeout_s < self.lease_s:
            raise ValueError(
                f"jobs.timeout_s ({self.timeout_s}) must be >= jobs.lease_s ({self.lease_s}): a job "
                "is given at least one whole lease before it can be declared hung"
            )
        if self.retry_base_s > self.retry_cap_s:
            raise ValueError("jobs.retry_base_s must be <= jobs.retry_cap_s")
        return self

    def queue_sources(self) -> list[SourceSettings]:
        """One dispatchable source per queue, named `jobs.<queue>` (its ready list's name)."""
        return [
            SourceSettings(
                name=f"{JOBS_SOURCE}.{queue}",
                table=self.table,
                id_column="id",
                due_column="run_at",
                period_s=0,
                on_success="delete",
                claim_batch=self.claim_batch,
                high_water=self.high_water,
                visibility_timeout_s=self.visibility_timeout_s,
            )
            for queue in self.queues
        ]


TOPICS_SOURCE = "topics"
TopicName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_]{0,31}$")]
# RocketMQ's consumer retry levels: 10 s, 30 s, 1-10 min, 20 min, 30 min, 1 h, 2 h.
RETRY_STEPS_S = [10.0, 30.0, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]


def _check_start(text: str) -> str:
    """A start position: "earliest", "latest", a message id, or an ISO time with its zone."""
    if text in ("earliest", "latest") or (text.isascii() and text.isdigit() and len(text) <= 19):
        return text
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ValueError('start must be "earliest", "latest", a message id, or an ISO time with a zone')
    return text


StartAt = Annotated[str, AfterValidator(_check_start)]


def topic_source(topic: str, group: str) -> str:
    """A cluster group's source and ready list: `topics.<topic>-<group>` (names have no "-")."""
    return f"{TOPICS_SOURCE}.{topic}-{group}"


class GroupSettings(_Section):
    """A consumer group of a topic: "cluster" (each message handled once by any one of its workers,
    acked, retried, dead-lettered) or "broadcast" (each live member reads every message, no acks)."""

    topic: TopicName
    name: TopicName
    mode: Literal["cluster", "broadcast"] = "cluster"
    start: StartAt = "latest"  # where a new group (or a new broadcast member) begins
    max_retries: int = Field(16, ge=0, le=1000)  # cluster: failed runs retried before dead
    timeout_s: float = Field(300.0, gt=0, le=7 * 86400)  # a message in flight longer is alerted on

    @property
    def source(self) -> str:
        return topic_source(self.topic, self.name)


class TopicsSettings(_Section):
    """Topics and their consumer groups (docs/topics.md); nothing is created until a topic is named."""

    names: list[TopicName] = []
    groups: list[GroupSettings] = []
    table_prefix: Identifier = "duecast_"  # tables <prefix>topics, messages, groups, deliveries...
    max_payload_bytes: int = Field(65_536, ge=16, le=16 * 1024 * 1024)
    retry_delays_s: list[float] = Field(default_factory=lambda: list(RETRY_STEPS_S), min_length=1)
    lease_s: float = Field(60.0, ge=2, le=86400)  # as jobs.lease_s, for a started message
    max_interruptions: int = Field(3, ge=1, le=1000)
    claim_batch: int = Field(2000, ge=1, le=10_000)
    high_water: int = Field(40_000, ge=1, le=10_000_000)
    visibility_timeout_s: float = Field(60.0, ge=1, le=86400)
    # Messages every group has finished are deleted this long after they were published.
    retention_s: float = Field(7 * 86400.0, ge=0, le=10 * 366 * 86400)
    maintain_interval_s: float = Field(5.0, gt=0, le=3600)  # pruning, alerts, metrics
    prune_batch: int = Field(5000, ge=1, le=100_000)
    member: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")  # default: host name
    member_ttl_s: float = Field(60.0, ge=3, le=86400)  # a broadcast member silent this long is gone
    poll_interval_s: float = Field(0.2, gt=0, le=60)  # a broadcast member's idle wait
    read_batch: int = Field(1000, ge=1, le=10_000)  # messages a broadcast member reads at once

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        for label, names in (("topics.names", self.names), ("groups", [g.source for g in self.groups])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{label} repeats {', '.join(dupes)}")
        for g in self.groups:
            if g.topic not in self.names:
                raise ValueError(f"group {g.name}: topic {g.topic!r} is not in topics.names")
            if len(g.topic) + len(g.name) > 47:
                raise ValueError(f"group {g.name}: topic and group names together exceed 47 characters")
        check_identifier(self.table("deliveries"))
        if self.claim_batch > self.high_water:
            raise ValueError("topics.claim_batch must be <= topics.high_water")
        return self

    def table(self, kind: str) -> str:
        """<prefix><kind>: topics, messages, groups, deliveries, attempts, members."""
        return self.table_prefix + kind

    def group(self, topic: str, name: str) -> GroupSettings:
        for g in self.groups:
            if (g.topic, g.name) == (topic, name):
                return g
        raise KeyError(f"no group {name!r} on topic {topic!r} in topics.groups")

    def group_sources(self) -> list[SourceSettings]:
        """One dispatchable source per cluster group: its deliveries, keyed by message id."""
        return [
            SourceSettings(
                name=g.source,
                table=self.table("deliveries"),
                id_column="seq",
                due_column="run_at",
                period_s=0,
                on_success="delete",
                claim_batch=self.claim_batch,
                high_water=self.high_water,
                visibility_timeout_s=self.visibility_timeout_s,
            )
            for g in self.groups
            if g.mode == "cluster"
        ]


class DispatcherSettings(_Section):
    # Optional: "package.module[:attribute]" holding a Registry whose schedules (Registry.schedule)
    # the dispatcher runs, and whose task names it checks schedules against.
    app: str | None = None
    poll_interval_s: float = Field(0.2, gt=0, le=60)
    sweep_interval_s: float = Field(5.0, gt=0, le=3600)
    sweep_batch: int = Field(5000, ge=1, le=100_000)
    run_sweeper: bool = True  # the dispatcher hosts the sweeper job unless a separate one runs
    range_discover_s: float = Field(10.0, gt=0, le=3600)  # range mode: look for new ids this often
    range_full_scan_s: float = Field(300.0, gt=0, le=86400)  # ...and rescan every span this often
    # Singleton duties (sweeper, pruner, recurring schedules, range discovery) run only in the
    # dispatcher holding this lease, a row in leases_table renewed every lease/3; a standby takes
    # over within the lease when the leader dies.
    leader_lease_s: float = Field(15.0, ge=3, le=3600)
    leases_table: Identifier = "duecast_leases"


class WorkerSettings(_Section):
    app: str | None = None  # "package.module" or "package.module:attribute" holding a Registry
    sources: list[str] = []  # empty: every source the app has handlers for ("jobs": its queues)
    queues: list[QueueName] = []  # job queues served, first = strictly first; empty: jobs.queues
    pop_batch: int = Field(2000, ge=1, le=10_000)
    block_timeout_s: float = Field(1.0, ge=0.1, le=2.0)  # never 0: loops must see stop requests
    concurrency: int = Field(1, ge=1, le=256)
    error_backoff_s: float = Field(1.0, gt=0, le=60)
    # Every worker registers in registry_table and beats every heartbeat_s (own thread and
    # connection). One silent for dead_after_s is dead: the leader dispatcher requeues the batch
    # it had popped (recorded in Redis) at once, instead of after the visibility timeout.
    registry_table: Identifier = "duecast_workers"
    heartbeat_s: float = Field(5.0, ge=0.5, le=300)
    dead_after_s: float = Field(15.0, ge=2, le=3600)

    @model_validator(mode="after")
    def _heartbeats(self) -> Self:
        if self.dead_after_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"worker.dead_after_s ({self.dead_after_s}) must be at least twice worker.heartbeat_s "
                f"({self.heartbeat_s}), or one late beat would declare a live worker dead"
            )
        return self


class HealthSettings(_Section):
    """The per-process HTTP endpoint: /healthz, /readyz and /metrics (shared/health.py)."""

    # 0 = no endpoint. Processes sharing a host (and network namespace) need a port each:
    # `duecast worker --health-port N` overrides this per process.
    port: int = Field(0, ge=0, le=65535)
    host: str = "0.0.0.0"  # noqa: S104 - probes and scrapers reach the process from outside
    # /healthz fails once the main loop has not turned for this long. A turn includes one whole
    # batch, and a failing tick's backoff (10 s at most) or a dead server's socket timeout: keep
    # this above the longest batch your handlers take.
    stale_after_s: float = Field(120.0, ge=15, le=86400)
    # /readyz serves the result of its own MySQL and Redis round trips, run this often.
    check_interval_s: float = Field(5.0, ge=0.1, le=300)
    # The dispatcher (only) reads every source's backlog and freshness this often for its gauges.
    gauges_interval_s: float = Field(15.0, ge=0.1, le=3600)


class WebSettings(_Section):
    """`duecast web`: the dashboard (duecast/web). Read-only unless a token is set."""

    host: str = "127.0.0.1"  # 0.0.0.0 to reach it from elsewhere; put TLS in front (docs/observability.md)
    port: int = Field(9190, ge=0, le=65535)  # 0: any free port (tests)
    # Retrying or discarding a dead job asks for this token on a confirmation page. Unset: the
    # dashboard changes nothing. Never shown, never logged.
    token: SecretStr | None = None
    sample_interval_s: float = Field(5.0, ge=0.1, le=3600)  # how often the charts get a point
    history_points: int = Field(720, ge=10, le=100_000)  # points kept in memory (1 h at 5 s)
    refresh_s: float = Field(5.0, ge=0, le=3600)  # open pages update themselves this often; 0 = never

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.token is not None and len(self.token.get_secret_value()) < 16:
            raise ValueError("web.token must be at least 16 characters (it guards retry and discard)")
        return self


class FaultSettings(_Section):
    """Fault-injection hooks for the fault tests. Never set in production."""

    crash_after_commit: bool = False  # dispatcher: os._exit right after COMMIT, before RPUSH
    kill_after_pop: bool = False  # worker: SIGKILL itself as soon as a pop returns entries


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
    faults: FaultSettings = FaultSettings()
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
        """A lease its keeper could not renew in time (shared/leases.py). Renewals run every lease/3
        and the worker stops itself at 0.8 of the lease without one, so the first renewal, even if
        its connection stalls once connecting and once reading, must end before that."""
        used = [("jobs.lease_s", self.jobs.lease_s)] if self.jobs.enabled else []
        if self.topics.group_sources():
            used.append(("topics.lease_s", self.topics.lease_s))
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


def load_settings(config: str | Path | None = None) -> Settings:
    """Build settings from the environment over the TOML file named by `config` or DUECAST_CONFIG."""
    raw = config if config is not None else os.environ.get("DUECAST_CONFIG")
    path = Path(raw) if raw else None
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"settings file {path} does not exist")
    token = _toml_path.set(path)
    try:
        return Settings()
    finally:
        _toml_path.reset(token)
