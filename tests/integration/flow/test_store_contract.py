"""The store contract (tests/unit/store_contract.py) against every real store kind on MariaDB.

Row-mode and range-mode sources, a cluster consumer group and a job queue, each built by build_stores
as the roles build them. A job queue's entries are runs of jobs: its kind runs one job per run and says
which job each entry hands out (tests/integration/jobs/test_job_runs.py proves what runs of many do).
The same suite runs against the unit tests' fake (tests/unit/storage/test_store_fakes.py). State is
arranged in SQL: rows inserted with the due order each kind sorts by, and time passed by back-dating
the dispatch (and lease) columns.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import pymysql
import pytest

from duecast.shared.acks import Row
from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.entries import Entry
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.leased.members import decode_members
from duecast.shared.storage.range_store import RANGE_KEY, RangeStore
from duecast.shared.storage.source_store import Store
from tests.unit.store_contract import ContractStore, StoreContract

pytestmark = pytest.mark.integration

RANGE_SIZE = 10
SPAN_BASE = 2  # range 1 covers id 0; seeded spans start at range 2 (ids 10..19)
LEASED = ("dc_dispatched_at", "lease_until")  # a RUNNING row's clock is its lease


class SqlKind:
    """A real store kind: its store as the roles get it, plus SQL on its dispatch table.

    `key` is the entry id column of `table` (each test's table holds this store's rows only).
    """

    def __init__(
        self,
        settings: Settings,
        sources: list[SourceSettings],
        sql: pymysql.cursors.Cursor,
        table: str,
        key: str,
        *,
        timed: Sequence[str] = ("dc_dispatched_at",),
    ) -> None:
        self.settings = settings
        self.sources = sources
        self.sql = sql
        self.table = table
        self.key = key
        self.timed = timed
        (self.store,) = build_stores(settings, sources)
        self._other: Store | None = None
        self.seeded = 0

    def other(self) -> ContractStore:
        """A second store on its own connection: another process, for calls while a batch is open."""
        if self._other is None:
            (self._other,) = build_stores(self.settings, self.sources)
        return self._other

    def backdate(self, ids: Sequence[int], seconds: float) -> None:
        moved = ", ".join(f"`{c}` = `{c}` - INTERVAL %s MICROSECOND" for c in self.timed)
        marks = ",".join(["%s"] * len(ids))
        self.sql.execute(
            f"UPDATE `{self.table}` SET {moved} WHERE `{self.key}` IN ({marks})",
            (*[round(seconds * 1e6)] * len(self.timed), *ids),
        )

    def entry_id(self, row: Row) -> int:
        return int(row[self.key])

    def handed(self, entries: Sequence[Entry]) -> list[Entry]:
        return list(entries)  # an entry is its row (or span)

    def next_ids(self, n: int) -> list[int]:
        """The next n ids to seed, in the order they are due: the highest id is the oldest, so a
        kind that claimed by id alone would fail the order checks."""
        first = self.seeded + 1
        self.seeded += n
        return list(range(first + n - 1, first - 1, -1))

    def close(self) -> None:
        for store in (self.store, self._other):
            if store is not None:
                cast(Any, store).db.close()  # every kind keeps its Database as `db`


class RowKind(SqlKind):
    def seed(self, n: int) -> list[int]:
        ids = self.next_ids(n)
        self.sql.executemany(
            f"INSERT INTO `{self.table}` (user_id, status, updated_time) "
            "VALUES (%s, 1, TIMESTAMP('2020-01-01') - INTERVAL %s SECOND)",
            [(i, i) for i in ids],
        )
        return ids


class RangeKind(SqlKind):
    """Entries are spans of RANGE_SIZE ids: `seed` writes business rows and discovers their spans."""

    def __init__(self, business: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.business = business

    def seed(self, n: int) -> list[int]:
        spans = [SPAN_BASE + i - 1 for i in self.next_ids(n)]
        lo, hi = (min(spans) - 1) * RANGE_SIZE, max(spans) * RANGE_SIZE - 1
        self.sql.execute(f"INSERT INTO `{self.business}` SELECT seq, 1, '2020-01-01' FROM seq_{lo}_to_{hi}")
        assert isinstance(self.store, RangeStore)
        self.store.discover(full=True)
        self.sql.execute(
            f"UPDATE `{self.table}` SET checked_at = TIMESTAMP('2020-01-01') - INTERVAL range_id SECOND "
            f"WHERE range_id BETWEEN {min(spans)} AND {max(spans)}"
        )
        return spans

    def entry_id(self, row: Row) -> int:
        return int(row[RANGE_KEY]) // RANGE_SIZE + 1  # a business row's span


class GroupKind(SqlKind):
    """A cluster group's entries are its topic's messages: published in order, claimed in order."""

    def seed(self, n: int) -> list[int]:
        publisher = Publisher(self.settings, None)
        try:
            return publisher.publish_many(Publish("orders", i) for i in range(n))
        finally:
            publisher.db.close()


class JobKind(SqlKind):
    """A job queue in runs of one job: an entry is a run, and hands out its job under the attempt
    that counts the job's ended runs (the job row's dc_attempt) and this run's own attempt."""

    def seed(self, n: int) -> list[int]:
        ids = self.next_ids(n)
        self.sql.executemany(
            f"INSERT INTO `{self.table}` (id, task, payload, run_at) "
            "VALUES (%s, 'record', '1', TIMESTAMP('2020-01-01') - INTERVAL %s SECOND)",
            [(i, i) for i in ids],
        )
        return ids

    def _runs(self) -> dict[int, list[int]]:
        self.sql.execute(f"SELECT id, members FROM `{self.settings.jobs.runs_table}`")
        return {int(i): decode_members(m) for i, m in self.sql.fetchall()}

    def backdate(self, ids: Sequence[int], seconds: float) -> None:
        """The runs that hold these jobs: their dispatch and lease."""
        runs = [run for run, members in self._runs().items() if set(members) & set(ids)]
        marks = ",".join(["%s"] * len(runs))
        self.sql.execute(
            f"UPDATE `{self.settings.jobs.runs_table}` SET dc_dispatched_at = dc_dispatched_at - INTERVAL %s "
            f"MICROSECOND, lease_until = lease_until - INTERVAL %s MICROSECOND WHERE id IN ({marks})",
            (round(seconds * 1e6), round(seconds * 1e6), *runs),
        )

    def handed(self, entries: Sequence[Entry]) -> list[Entry]:
        runs = self._runs()
        out = []
        for entry in entries:
            for job in runs[entry.id]:
                self.sql.execute(f"SELECT dc_attempt FROM `{self.table}` WHERE id = %s", (job,))
                out.append(Entry(job, int(self.sql.fetchone()[0]) + entry.attempt))
        return out


def _settings(mysql: MySQLSettings, **sections: Any) -> Settings:
    settings = Settings(mysql=mysql, **{"jobs": {"enabled": False}, **sections})
    migrate.apply(settings)
    return settings


class TestRowStore(StoreContract):
    @pytest.fixture
    def kind(self, make_env: Callable[..., Any], sql: pymysql.cursors.Cursor) -> Iterator[SqlKind]:
        env = make_env("rescan")  # its fixture drops the table
        kind = RowKind(env.settings, [env.source], sql, env.table, "user_id")
        yield kind
        kind.close()


class TestRangeStore(StoreContract):
    @pytest.fixture
    def kind(self, mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor) -> Iterator[SqlKind]:
        table = f"t_ranged_{uuid.uuid4().hex[:8]}"
        sql.execute(
            f"CREATE TABLE `{table}` (user_id BIGINT PRIMARY KEY, status INT NOT NULL DEFAULT 1, "
            "updated_time DATETIME(6) NOT NULL)"
        )
        src = SourceSettings(
            name=table,
            table=table,
            id_column="user_id",
            due_column="updated_time",
            # A day: an acked span is due again at its next phase point (shared/pace.py), which can be
            # any moment of the period; with 10 s it came within the test now and then, and a claim
            # that must hand out only the requeued span handed out an acked one too.
            period_s=86_400,
            mode="ranges",
            range_size=RANGE_SIZE,
        )
        settings = _settings(mysql_settings, sources=[src])
        kind = RangeKind(table, settings, [src], sql, ranges_table(src), "range_id")
        yield kind
        kind.close()
        sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{ranges_table(src)}`")


class TestClusterGroupStore(StoreContract):
    @pytest.fixture
    def kind(self, mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor) -> Iterator[SqlKind]:
        topics = {
            "table_prefix": f"t{uuid.uuid4().hex[:8]}_",
            "names": ["orders"],
            "groups": [{"topic": "orders", "name": "audit", "start": "earliest"}],
        }
        settings = _settings(mysql_settings, topics=topics)
        deliveries = settings.topics.table("deliveries")
        kind = GroupKind(settings, settings.topics.group_sources(), sql, deliveries, "seq", timed=LEASED)
        yield kind
        kind.close()
        for part in ("topics", "messages", "groups", "deliveries", "attempts", "members"):
            sql.execute(f"DROP TABLE IF EXISTS `{settings.topics.table(part)}`")


class TestJobStore(StoreContract):
    @pytest.fixture
    def kind(self, mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor) -> Iterator[SqlKind]:
        table = f"jobs_{uuid.uuid4().hex[:8]}"
        jobs = {"enabled": True, "table": table, "schedules_table": f"{table}_s", "run_size": 1}
        settings = _settings(mysql_settings, jobs=jobs)
        kind = JobKind(settings, [settings.source("jobs.default")], sql, table, "id")
        yield kind
        kind.close()
        sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")
