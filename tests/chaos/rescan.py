"""The soak's re-scan sources beside the jobs: a row-mode table and a range-mode one, and the record of
every ack applied to them, written by triggers inside the ack's own transaction. The row-mode source
has a rate limit that binds (a quarter below rows / period), and a trigger records each of its
claims, in the claim's own statement: what the limit governs (limits_checker.py). This module owns
their DDL and reads only; the checkers (rescan_checker.py, limits_checker.py) judge what they hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import DispatcherSettings, SourceSettings
from duecast.shared.states import ATTEMPT_COLUMN, STATE_COLUMN, State
from tests.chaos.app import RESCAN_RANGES, RESCAN_ROWS
from tests.chaos.limits_checker import RateLimit, RateVerdict, judge_rate
from tests.chaos.rescan_checker import Check, RescanSource, read_rescan_starts

Query = Callable[..., list[tuple[Any, ...]]]


@dataclass
class RescanTables:
    query: Query  # the harness' autocommit session
    suffix: str
    rows: int = 2000  # row mode: three row writes per check (claim, start, ack)
    range_rows: int = 5000  # range mode: one range-row write per range_size rows checked
    period_s: float = 5.0
    range_size: int = 100
    visibility_timeout_s: float = 5.0
    lease_s: float = 3.0  # a started row's (span's) lease: a stopped or killed worker's are back this soon
    # The row-mode source's rate_limit_per_s, as a share of its demand (rows / period): below 1, the
    # limit binds all along, and each row is checked every period / share instead.
    rate_share: float = 0.75
    burst_s: float = 0.1  # its rate_burst: this many seconds' worth

    def __post_init__(self) -> None:
        self.table = f"chaos_rescan_{self.suffix}"
        self.ranged = f"chaos_ranged_{self.suffix}"
        self.checks_table = f"chaos_checks_{self.suffix}"
        self.claims_table = f"chaos_claims_{self.suffix}"
        rate = self.rate_share * self.rows / self.period_s
        self.rate = RateLimit(rate, max(1.0, rate * self.burst_s))
        common: dict[str, Any] = {
            "due_column": "checked_at",
            "period_s": self.period_s,
            "visibility_timeout_s": self.visibility_timeout_s,
            "lease_s": self.lease_s,
        }
        self.sources = [
            SourceSettings(
                name=RESCAN_ROWS,
                table=self.table,
                claim_batch=200,
                high_water=1000,
                rate_limit_per_s=self.rate.rate_per_s,
                rate_burst=self.rate.burst,
                **common,
            ),
            SourceSettings(
                name=RESCAN_RANGES,
                table=self.ranged,
                mode="ranges",
                range_size=self.range_size,
                claim_batch=1000,  # rows: 10 ranges
                high_water=2000,
                **common,
            ),
        ]
        self.ranges = ranges_table(self.sources[1])  # named after the source: one per database

    def create_tables(self) -> None:
        """The business tables and the acks record; then migrate, then `create_triggers`."""
        period_us = round(self.period_s * 1e6)
        self.query(
            f"CREATE TABLE `{self.table}` (id BIGINT PRIMARY KEY, checked_at DATETIME(6) NOT NULL, "
            "checked_by_attempt BIGINT NULL, checked_by_pid INT NULL)"
        )
        # Due times spread over one period, so the checks flow evenly from the start.
        self.query(
            f"INSERT INTO `{self.table}` (id, checked_at) "
            f"SELECT seq, NOW(6) - INTERVAL (seq * {period_us} DIV {self.rows}) MICROSECOND "
            f"FROM seq_1_to_{self.rows}"
        )
        self.query(f"CREATE TABLE `{self.ranged}` (id BIGINT PRIMARY KEY, checked_at DATETIME(6) NOT NULL)")
        self.query(f"INSERT INTO `{self.ranged}` SELECT seq, '2020-01-01' FROM seq_1_to_{self.range_rows}")
        self.query(f"DROP TABLE IF EXISTS `{self.ranges}`")  # a run killed before its clean-up
        self.query(
            f"CREATE TABLE `{self.checks_table}` (seq BIGINT AUTO_INCREMENT PRIMARY KEY, "
            "source VARCHAR(48) NOT NULL, unit BIGINT NOT NULL, attempt BIGINT NOT NULL, "
            "was_state INT NOT NULL, by_attempt BIGINT NULL, pid INT NULL, at DECIMAL(17, 6) NOT NULL, "
            "KEY (at))"
        )
        self.query(
            f"CREATE TABLE `{self.claims_table}` (seq BIGINT AUTO_INCREMENT PRIMARY KEY, "
            "unit BIGINT NOT NULL, attempt BIGINT NOT NULL, at DECIMAL(17, 6) NOT NULL)"
        )

    def create_triggers(self) -> None:
        """An ack is the only write that moves a due column here (claims, starts, requeues and
        releases leave it; a failed check would too, but the soak's re-scan handlers never fail), so
        each trigger records exactly the acks applied, in their own transactions: a rolled-back ack
        leaves no record. Both record the fence's attempt and state (RUNNING) as they were before it."""
        self._trigger(
            self.table,
            f"'{RESCAN_ROWS}', OLD.id, OLD.{ATTEMPT_COLUMN}, OLD.{STATE_COLUMN}, "
            "NEW.checked_by_attempt, NEW.checked_by_pid",
        )
        # Range mode's ack marks the span's range row (range_id = id DIV range_size + 1).
        # A claim (IDLE -> DISPATCHED under a new attempt): the time is its statement's NOW(6), the one
        # it writes as dc_dispatched_at. No other write of a re-scan row moves its attempt.
        self.query(
            f"CREATE TRIGGER `{self.table}_claim` AFTER UPDATE ON `{self.table}` FOR EACH ROW "
            f"IF NEW.{ATTEMPT_COLUMN} <> OLD.{ATTEMPT_COLUMN} AND OLD.{STATE_COLUMN} = {int(State.IDLE)} "
            f"AND NEW.{STATE_COLUMN} = {int(State.DISPATCHED)} THEN "
            f"INSERT INTO `{self.claims_table}` (unit, attempt, at) "
            f"VALUES (NEW.id, NEW.{ATTEMPT_COLUMN}, UNIX_TIMESTAMP(NOW(6))); END IF"
        )
        self._trigger(
            self.ranges,
            f"'{RESCAN_RANGES}', OLD.range_id - 1, OLD.{ATTEMPT_COLUMN}, OLD.{STATE_COLUMN}, NULL, NULL",
        )

    def _trigger(self, table: str, values: str) -> None:
        self.query(
            f"CREATE TRIGGER `{table}_ack` AFTER UPDATE ON `{table}` FOR EACH ROW "
            "IF NOT (NEW.checked_at <=> OLD.checked_at) THEN "
            f"INSERT INTO `{self.checks_table}` (source, unit, attempt, was_state, by_attempt, pid, at) "
            f"VALUES ({values}, UNIX_TIMESTAMP(NOW(6))); END IF"
        )

    def drop(self) -> None:
        tables = (self.table, self.ranged, self.ranges, self.checks_table, self.claims_table)
        self.query("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in tables))
        limits = DispatcherSettings().limits_table
        self.query(f"DELETE FROM `{limits}` WHERE name = %s", (RESCAN_ROWS,))

    # ---------------------------------------------------------------- reads

    def expected(self) -> list[RescanSource]:
        return [
            RescanSource(RESCAN_ROWS, range(1, self.rows + 1)),
            RescanSource(RESCAN_RANGES, range(1, self.range_rows + 1), self.range_size),
        ]

    def units(self) -> int:
        return sum(len(s.rows_by_unit()) for s in self.expected())

    def covered_since(self, at: float) -> int:
        """How many units (rows, spans) had an ack applied at or after `at` (the database's clock)."""
        rows = self.query(
            f"SELECT COUNT(DISTINCT source, unit) FROM `{self.checks_table}` WHERE at >= %s", (at,)
        )
        return int(rows[0][0])

    def checks(self) -> list[Check]:
        columns = "source, unit, attempt, was_state, by_attempt, pid, at"
        rows = self.query(f"SELECT {columns} FROM `{self.checks_table}` ORDER BY seq")
        return [
            Check(
                str(source),
                int(unit),
                int(attempt),
                int(state) == State.RUNNING,
                None if by is None else int(by),
                None if pid is None else int(pid),
                float(at),
            )
            for source, unit, attempt, state, by, pid, at in rows
        ]

    def rate_verdict(self, rescan_log: Path, in_hand: int) -> RateVerdict:
        """The row-mode source's claims per window against its rate limit, and its handler starts
        (`rescan_log`) against that plus what can wait in Redis and (`in_hand`) in workers' hands."""
        claims = [float(at) for (at,) in self.query(f"SELECT at FROM `{self.claims_table}`")]
        src = self.sources[0]
        listed = src.high_water + src.claim_batch
        return judge_rate(self.rate, claims, read_rescan_starts(rescan_log, RESCAN_ROWS), listed + in_hand)
