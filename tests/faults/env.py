"""The fault tier's plain helpers: FaultEnv (SQL, Redis and process helpers over one test's
source table), the constants tests share, and the child processes' environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import redis

from duecast.shared.entries import Entry, encode_entry
from duecast.shared.fanout.keys import Keys
from duecast.shared.settings import MySQLSettings, RedisSettings, SourceSettings
from tests.faults import app
from tests.faults.checker import Execution, Verdict, classify, read_log
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Proc, Procs, tcp_peers, wait_for

APP = "tests.faults.app"
# The real roles, wrapped by a test-owned entry module that stops them at one instant.
CRASH_AFTER_COMMIT = "tests.faults.crash_after_commit"  # the dispatcher exits (70) before its first push
KILL_AFTER_POP = "tests.faults.kill_after_pop"  # the worker SIGKILLs itself as its first pop returns
WAIT_S = 30.0  # generous: only a failing test ever waits this long
IDLE, DISPATCHED, RUNNING = 0, 1, 2
SOURCE_NAMES = {"oneoff": app.ONEOFF, "rescan": app.RESCAN}
# Scenarios that do not depend on the kind of source run on both: the one-off kind (ack = DELETE)
# is the issue's; the re-scan kind (ack = UPDATE) also records which attempt's ack landed.
KINDS = ["oneoff", "rescan"]
# A re-scan row's period. A check records its row's slot in the period (an even pace,
# shared.queries.pace): the first check of a row far from its phase may record a slot up to a
# period earlier, so the row is due again at its phase, which may come within the test. A month
# makes that chance negligible (a phase within a test's seconds); each scenario's re-checks are its own.
RESCAN_PERIOD_S = 30 * 86_400
# Exception class names a process may log when a test takes a server away from it (`allow=`):
# redis-py's error and its socket-level causes; PyMySQL's errors on a closed session.
REDIS_DOWN = ("ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "BrokenPipeError")
SESSION_LOST = (
    "TransientError",
    "OperationalError",
    "InterfaceError",
    "ConnectionResetError",
    "BrokenPipeError",
)


@dataclass(frozen=True)
class Batch:
    """What a worker's handler wrote to its marker file when a batch started."""

    pid: int
    entries: tuple[Entry, ...]

    @property
    def ids(self) -> set[int]:
        return {e.id for e in self.entries}


@dataclass
class FaultEnv:
    source: SourceSettings
    sql: pymysql.cursors.Cursor  # autocommit
    mysql: MySQLSettings
    keys: Keys
    redis: redis.Redis  # the server the child processes use
    tmp: Path
    procs: Procs
    env: dict[str, str]  # the children's environment
    exec_log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.exec_log = self.tmp / "exec.log"
        self.env["DUECAST_TEST_EXEC_LOG"] = str(self.exec_log)

    # ---------------------------------------------------------------- processes

    def use_redis(self, server: PrivateRedis) -> None:
        """Point every process started from now on (and the helpers) at a private redis-server."""
        self.env["DUECAST_REDIS__URL"] = server.url
        self.redis = server.client

    def dispatcher(
        self,
        name: str = "dispatcher",
        *,
        module: str = "duecast.dispatcher",
        may_exit: bool = False,
        allow: Iterable[str] = (),
        **env: object,
    ) -> Proc:
        """`allow`: exception class names it may log (any other fails the test at the next wait);
        `module`: what to run, e.g. CRASH_AFTER_COMMIT (the real role, stopped at one instant)."""
        args = ["-m", module]
        return self.procs.spawn(name, args, self._env(env), may_exit=may_exit, allow=allow)

    def sweep_once(self) -> int:
        """Run `duecast sweeper --once` as its own process; returns its exit code."""
        proc = self.procs.spawn(
            f"sweeper-{len(self.procs.procs)}", ["-m", "duecast", "sweeper", "--once"], self.env
        )
        return self.procs.wait_exit(proc, WAIT_S)

    def worker(
        self,
        name: str,
        *,
        module: str = "duecast.worker",
        may_exit: bool = False,
        allow: Iterable[str] = (),
        **env: object,
    ) -> Proc:
        args = ["-m", module, "--app", APP, "--source", self.source.name]
        return self.procs.spawn(name, args, self._env(env), may_exit=may_exit, allow=allow)

    def _env(self, extra: dict[str, object]) -> dict[str, str]:
        return {**self.env, **{k: str(v) for k, v in extra.items()}}

    def wait_for(self, pred: Callable[[], object], what: str, timeout: float = WAIT_S) -> None:
        """Poll `pred`; fails early if a process dies or logs an exception the test did not expect."""
        wait_for(pred, timeout, what, check=self.procs.check)

    def wait_batch(self, marker: Path) -> Batch:
        """The batch a worker's handler announced in `marker` (the handler writes it atomically)."""
        self.wait_for(marker.exists, f"a batch to start ({marker.name})")
        data = json.loads(marker.read_text())
        return Batch(int(data["pid"]), tuple(Entry(int(i), int(a)) for i, a in data["entries"]))

    def wait_listening(self, proc: Proc) -> None:
        """Until `proc` holds a connection to Redis: a worker opens it for its first BLMPOP."""
        port = int(self.redis.connection_pool.connection_kwargs["port"])
        self.wait_for(
            lambda: any(remote == port for _, remote in tcp_peers(proc.pid)),
            f"{proc.name} to connect to Redis",
        )

    def mysql_sessions(self, proc: Proc) -> list[int]:
        """The MySQL thread ids of `proc`'s connections, matched by its TCP client ports."""
        ports = {str(local) for local, remote in tcp_peers(proc.pid) if remote == self.mysql.port}
        rows = self.query(
            "SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE DB = %s", (self.mysql.database,)
        )
        return [int(i) for i, host in rows if str(host).rsplit(":", 1)[-1] in ports]

    def session_alive(self, thread_id: int) -> bool:
        return bool(self.query("SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s", (thread_id,)))

    # ---------------------------------------------------------------- SQL

    def query(self, stmt: str, args: Any = None) -> list[tuple[Any, ...]]:
        """Run `stmt`, `{t}` being the test table; returns every row."""
        self.sql.execute(stmt.format(t=f"`{self.source.table}`"), args)
        return list(self.sql.fetchall())

    def insert(self, n: int, start: int = 1, due_ago_s: float = 2 * RESCAN_PERIOD_S) -> list[int]:
        """Rows start..start+n-1, last touched `due_ago_s` ago (due: past a re-scan row's period)."""
        ids = list(range(start, start + n))
        self.query(
            f"INSERT INTO {{t}} (id, due_at) SELECT seq, NOW(6) - INTERVAL %s MICROSECOND "
            f"FROM seq_{start}_to_{start + n - 1}",
            (round(due_ago_s * 1e6),),
        )
        return ids

    def dispatch_directly(self, ids: Iterable[int], attempt: int = 1, ago_s: float = 0) -> None:
        """Mark rows DISPATCHED at `attempt` as if a dispatcher had claimed them `ago_s` ago."""
        self.query(
            "UPDATE {t} SET dc_state = %s, dc_attempt = %s, "
            "dc_dispatched_at = NOW(6) - INTERVAL %s MICROSECOND WHERE id IN %s",
            (DISPATCHED, attempt, round(ago_s * 1e6), tuple(ids)),
        )

    def rows(self) -> dict[int, tuple[int, int]]:
        """id -> (dc_state, dc_attempt) for every row left in the table."""
        return {
            int(i): (int(s), int(a)) for i, s, a in self.query("SELECT id, dc_state, dc_attempt FROM {t}")
        }

    def pending(self) -> set[int]:
        """Rows whose work is not done: one-off rows still in the table; re-scan rows not acked by
        the handler of their current attempt."""
        if self.source.on_success == "delete":
            return {int(r[0]) for r in self.query("SELECT id FROM {t}")}
        done = "dc_state = 0 AND dc_attempt > 0 AND checked_by_attempt <=> dc_attempt"
        return {int(r[0]) for r in self.query(f"SELECT id FROM {{t}} WHERE NOT ({done})")}

    def column(self, name: str) -> dict[int, Any]:
        return {int(i): v for i, v in self.query(f"SELECT id, `{name}` FROM {{t}}")}

    def back_date(self, ids: Iterable[int], attempt: int | None = None, seconds: float = 3600) -> int:
        """Age these rows in flight (still at `attempt`, if given) by `seconds`: a DISPATCHED row's
        dispatch (past any visibility timeout, by default), a started (RUNNING) row's lease, from
        its last renewal (past any lease). Returns how many; waits for a row lock like any statement."""
        ids = tuple(ids)
        if not ids:
            return 0
        fence = "" if attempt is None else f" AND dc_attempt = {int(attempt)}"
        self.query(
            "UPDATE {t} SET dc_dispatched_at = dc_dispatched_at - INTERVAL %s MICROSECOND "
            f"WHERE id IN %s AND dc_state IN (%s, %s){fence}",
            (round(seconds * 1e6), ids, DISPATCHED, RUNNING),
        )
        return int(self.sql.rowcount)

    def leased_since(self, ids: Iterable[int]) -> float:
        """Seconds since the least recent lease renewal of these started rows (by NOW(6))."""
        rows = self.query(
            "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(dc_dispatched_at), NOW(6)) FROM {t} "
            "WHERE id IN %s AND dc_state = %s",
            (tuple(ids), RUNNING),
        )
        return float(rows[0][0]) / 1e6

    # ---------------------------------------------------------------- Redis

    @property
    def ready_key(self) -> str:
        return self.keys.ready(self.source.name)

    def llen(self) -> int:
        return int(self.redis.llen(self.ready_key))

    def push(self, entries: Iterable[Entry]) -> None:
        self.redis.rpush(self.ready_key, *(encode_entry(e.id, e.attempt) for e in entries))

    def stats(self) -> dict[str, int]:
        raw = self.redis.hgetall(self.keys.stats(self.source.name))
        return {_b(k).decode(): int(v) for k, v in raw.items()}

    # ---------------------------------------------------------------- the execution log

    def executions(self, pid: int | None = None) -> list[Execution]:
        runs = read_log(self.exec_log)
        return [e for e in runs if pid is None or e.pid == pid]

    def verdict(self, expected: Iterable[int]) -> Verdict:
        """Classify the log; a row whose work is still pending counts as lost."""
        outcomes = self.column("checked_by_attempt") if self.source.on_success == "touch" else None
        return classify(read_log(self.exec_log), self.source.name, expected, self.pending(), outcomes)


def _b(value: bytes | str) -> bytes:
    """Our clients never decode replies; redis-py's types just do not say so."""
    return value if isinstance(value, bytes) else value.encode()


def _create_table(cur: pymysql.cursors.Cursor, table: str, kind: str) -> None:
    extra = ", checked_by_attempt INT NULL" if kind == "rescan" else ""
    cur.execute(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, due_at DATETIME(6) NOT NULL{extra})")


_NOT_INHERITED = (
    "DUECAST_TEST_",
    "DUECAST_CONFIG",
    "DUECAST_SOURCES",
    "DUECAST_JOBS__",
    "DUECAST_DISPATCHER__",
    "DUECAST_WORKER__",
)


def _child_env(mysql: MySQLSettings, redis_settings: RedisSettings, source: SourceSettings) -> dict[str, str]:
    # Nothing a developer's shell sets for duecast's roles leaks into a test's processes.
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env.update(
        {
            "DUECAST_MYSQL__DATABASE": mysql.database,
            "DUECAST_REDIS__URL": redis_settings.url.get_secret_value(),
            "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
            "DUECAST_SOURCES": json.dumps([source.model_dump(mode="json")]),
            "DUECAST_JOBS__ENABLED": "false",
            "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
            "DUECAST_DISPATCHER__SWEEP_INTERVAL_S": "0.2",
            "DUECAST_WORKER__POP_BATCH": "10",
            "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",  # an idle worker sees SIGTERM quickly
            "DUECAST_WORKER__ERROR_BACKOFF_S": "0.1",  # and recovers quickly from a Redis restart
            "DUECAST_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env
