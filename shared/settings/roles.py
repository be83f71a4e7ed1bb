"""Per-role settings: the dispatcher, the worker, the health endpoint, the dashboard."""

from __future__ import annotations

from typing import Self

from pydantic import Field, SecretStr, model_validator

from .base import Identifier, _Section
from .sources import (
    QueueName,
)


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
    limits_table: Identifier = "duecast_limits"  # token buckets of rate_limit_per_s (settings/limits.py)


class WorkerSettings(_Section):
    # "package.module" or "package.module:attribute" holding a Registry; several, comma-separated,
    # serve every one of them (as repeating --app does)
    app: str | None = None
    # empty: every configured source the app has handlers for ("jobs": its queues); a handler for one
    # not configured is named in one warning at start
    sources: list[str] = []
    queues: list[QueueName] = []  # job queues served, first = strictly first; empty: jobs.queues
    pop_batch: int = Field(2000, ge=1, le=10_000)
    block_timeout_s: float = Field(1.0, ge=0.1, le=2.0)  # never 0: loops must see stop requests
    concurrency: int = Field(1, ge=1, le=256)  # threads for plain (not async def) handlers
    # Rows started and not yet acked, per process: async handlers await all of them at once, plain
    # ones run `concurrency` at a time. Unset: 10,000 (at least 2 x pop_batch) when the app has an
    # async handler, else pop_batch (one batch, refilled as its rows finish). It is a ceiling: each
    # async source's in-flight window adapts under it to what the service it calls takes (halved
    # on time-outs and errors, eased when calls wait near their time limit, grown while they are
    # quick). A client's pool of C connections at L s a call serves C / L calls a second: with a
    # timeout of T s, at most C x T / L calls fit in flight (half of that keeps a margin). The
    # window learns T from the first time-outs; a source's timeout_s set to the client's timeout
    # lets it ease before them. Shared fairly by the sources served: each keeps its share while
    # active, so no backlog starves another (docs/architecture.md#sharing-a-worker-fairness).
    max_in_flight: int | None = Field(None, ge=1, le=1_000_000)
    error_backoff_s: float = Field(1.0, gt=0, le=60)
    # How long a batch's unit is retried after transient MySQL errors (a restart takes tens of
    # seconds), paced by a backoff capped at error_backoff_s; a worker that gives up pushes the
    # batch's entries back onto the ready list at once, for the next worker (or itself) to take.
    unit_retry_s: float = Field(30.0, ge=0, le=600)
    # Every worker registers in registry_table and beats every heartbeat_s (own thread and
    # connection). One silent for dead_after_s is dead: the leader dispatcher requeues the batch
    # it had popped (recorded in Redis) at once, instead of after the visibility timeout.
    registry_table: Identifier = "duecast_workers"
    heartbeat_s: float = Field(5.0, ge=0.5, le=300)
    dead_after_s: float = Field(15.0, ge=2, le=3600)
    # A worker's sessions (not an enqueuer's or a caller's) left idle inside an open transaction
    # this long are ended by the server, their locks released: a worker stopped (SIGSTOP) inside an
    # ack holds duecast's rows no longer than this. MariaDB 10.3+ (idle_transaction_timeout);
    # MySQL 8.0 has no such limit (docs/reliability.md). Unset: the longest lease_s of the sources
    # the worker serves, rounded up; 0: off. A transactional task must not sit idle in its
    # transaction (no statement running) longer than this.
    idle_transaction_s: int | None = Field(None, ge=0, le=86400)

    @model_validator(mode="after")
    def _heartbeats(self) -> Self:
        if self.dead_after_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"worker.dead_after_s ({self.dead_after_s}) must be at least twice worker.heartbeat_s "
                f"({self.heartbeat_s}), or one late beat would declare a live worker dead"
            )
        return self


class HealthSettings(_Section):
    """The per-process HTTP endpoint: /healthz, /readyz and /metrics (shared/process/health.py)."""

    # 0 = no endpoint. Processes sharing a host (and network namespace) need a port each:
    # `duecast worker --health-port N` overrides this per process.
    port: int = Field(0, ge=0, le=65535)
    # Like the dashboard, local only unless asked: the endpoint has no authentication. In a
    # container the kubelet's probes and a scraper come from outside: set 0.0.0.0 there
    # (deploy/k8s/configmap.yaml and deploy/compose.yaml do).
    host: str = "127.0.0.1"
    # /healthz fails once the main loop has not turned for this long. A turn includes one whole
    # batch, and a failing tick's backoff (10 s at most) or a dead server's socket timeout: keep
    # this above the longest batch your handlers take.
    stale_after_s: float = Field(120.0, ge=15, le=86400)
    # /readyz serves the result of its own MySQL and Redis round trips, run this often.
    check_interval_s: float = Field(5.0, ge=0.1, le=300)
    # The dispatcher (only) reads every source's backlog and freshness this often for its gauges.
    gauges_interval_s: float = Field(15.0, ge=0.1, le=3600)


class WebSettings(_Section):
    """`duecast web`: the dashboard (cli/web). Read-only unless a token is set."""

    host: str = "127.0.0.1"  # 0.0.0.0 to reach it from elsewhere; put TLS in front (docs/observability.md)
    port: int = Field(9190, ge=0, le=65535)  # 0: any free port (tests)
    # Retrying or discarding a dead job asks for this token on a confirmation page. Unset: the
    # dashboard changes nothing. Never shown, never logged.
    token: SecretStr | None = None
    sample_interval_s: float = Field(5.0, ge=0.1, le=3600)  # how often the charts get a point
    history_points: int = Field(720, ge=10, le=100_000)  # points kept in memory (1 h at 5 s)
    refresh_s: float = Field(5.0, ge=0, le=3600)  # open pages update themselves this often; 0 = never
    # The HTTP server (waitress), limited on purpose: readings come from the sampler, so a few
    # request threads serve many viewers. Open connections beyond connection_limit wait unaccepted,
    # and a connection idle for channel_timeout_s is closed, so idle or half-sent requests cannot
    # hold the dashboard for long (waitress's defaults: 100 connections, 120 s).
    threads: int = Field(4, ge=1, le=64)
    connection_limit: int = Field(500, ge=10, le=10_000)
    channel_timeout_s: int = Field(30, ge=1, le=3600)
    max_request_body_bytes: int = Field(65_536, ge=1024, le=16 * 1024 * 1024)  # forms: a token and ids

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.token is not None and len(self.token.get_secret_value()) < 16:
            raise ValueError("web.token must be at least 16 characters (it guards retry and discard)")
        return self
