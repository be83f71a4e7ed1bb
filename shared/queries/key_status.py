"""SQL of `duecast status`'s concurrency keys (`[jobs.key_limits.<queue>]`, shared/storage/key_status.py
runs it): a key-limited queue's busiest keys now, and how many keys have pending jobs. Each is an
index range of dc_key with a LIMIT: bounded however many keys and jobs the queue holds."""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from .jobs import DISPATCHED, IDLE, RUNNING

# Runs one reading counts at most (a queue's keyed runs: in flight, or made pending again). A fleet
# runs far fewer at once; past it the counts are of the first ones in dc_key's order, and say so.
RUNS_READ = 10_000
# Pending keyed jobs one reading reads at most to count their keys (dc_key entries, in key order):
# past it the count is of the keys of the first ones, shown as `N+`.
JOBS_READ = 10_000


@dataclass(frozen=True)
class KeyStatusSQL:
    busiest: str
    keys_pending: str


def render_key_status(jobs_table: str, runs_table: str) -> KeyStatusSQL:
    j, r = quote(jobs_table), quote(runs_table)
    return KeyStatusSQL(
        # Jobs in flight by key, busiest first (args: queue, RUNS_READ, keys shown): in flight as the
        # claim counts it (shared.queries.key_runs' key_runs). The window counts every key in flight,
        # and `runs` says whether RUNS_READ cut the read short.
        busiest=(
            "SELECT `concurrency_key`, SUM(`jobs`) AS `n`, COUNT(*) OVER (), SUM(COUNT(*)) OVER () FROM ("
            f"SELECT `concurrency_key`, `jobs` FROM {r} FORCE INDEX (`dc_key`) WHERE `queue` = %s "
            f"AND `concurrency_key` IS NOT NULL AND (`dc_state` = {DISPATCHED} OR (`dc_state` = {RUNNING} "
            "AND `lease_until` > NOW(6))) LIMIT %s) AS `runs` "
            "GROUP BY `concurrency_key` ORDER BY `n` DESC, `concurrency_key` LIMIT %s"
        ),
        # Keys with pending jobs, the keys the claim's round robin visits, and the jobs read (args:
        # queue, JOBS_READ): one range of dc_key, read from the index alone and cut at JOBS_READ
        # entries. (MariaDB's loose scan, one entry per key, cannot be forced: with few jobs per key
        # it groups the whole range, and a recursive skip-scan's correlated dive is a ref, not a
        # range: both read every pending keyed job.)
        keys_pending=(
            "SELECT COUNT(DISTINCT `concurrency_key`), COUNT(*) FROM ("
            f"SELECT `concurrency_key` FROM {j} FORCE INDEX (`dc_key`) WHERE `dc_state` = {IDLE} "
            "AND `queue` = %s AND `concurrency_key` IS NOT NULL LIMIT %s) AS `pending`"
        ),
    )
