"""Benchmark: MariaDB's work per row-mode check, one check path at a time: claim, start, ack, as the
dispatcher and a worker run them (SourceStore / RowBatch), in one process with nothing else running.

Prints, per check, the statements the session ran and the server's handler operations for it (SHOW
SESSION STATUS deltas on the store's own connection: exact whatever else the server does), the
wall time of each step, and mariadbd's CPU (/proc: it includes purge, and other users' work).

    scripts/dev shell python bench/row_path.py                      # 100,000 users, batches of 2,000
    scripts/dev shell python bench/row_path.py --users 50000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from harness import check_namespace, exclusive, use_bench_namespace
from rescan import mariadb_pid

from duecast.cli.demo.fleet import cpu_seconds
from duecast.shared.acks import Ack
from duecast.shared.settings import Settings, load_settings
from duecast.shared.storage.admin import demo_table as demo_data
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.source_store import SourceStore

COUNTERS = (
    "Com_select",
    "Com_update",
    "Com_commit",
    "Handler_read_key",
    "Handler_read_next",
    "Handler_update",
    "Handler_write",
    "Handler_delete",
)


def session_status(store: SourceStore) -> dict[str, float]:
    """The store's session's counters (its claims, starts and acks; SHOW STATUS adds none of them)."""
    with store.db.transaction() as cur:
        cur.execute("SHOW SESSION STATUS")
        values = dict(cur.fetchall())
    return {name: float(values.get(name, 0) or 0) for name in COUNTERS}


def one_round(settings: Settings, store: SourceStore, batch: int, checks: int) -> dict[str, float]:
    """Every user due, then claim/start/ack batches until `checks` rows were acked; per-check deltas."""
    demo_data.make_all_due(settings.mysql, store.src)
    store.reset_dispatched()
    time.sleep(2.0)  # purge catches up with the reset: each round starts alike
    pid = mariadb_pid()
    before = session_status(store)
    cpu_before = cpu_seconds(pid) if pid else 0.0
    spent = {"claim": 0.0, "start": 0.0, "ack": 0.0}
    done = 0
    while done < checks:
        t0 = time.perf_counter()
        entries = store.claim_due(min(batch, checks - done))
        if not entries:
            raise SystemExit(f"only {done} rows were due: use more --users or fewer --checks")
        t1 = time.perf_counter()
        with store.started(entries, ["status"]) as started_rows:
            t2 = time.perf_counter()
            counts = started_rows.ack([(row, Ack.default()) for row in started_rows.rows])
        t3 = time.perf_counter()
        for step, took in zip(spent, (t1 - t0, t2 - t1, t3 - t2), strict=True):
            spent[step] += took
        if counts.acked != len(entries):
            raise SystemExit(f"{len(entries)} claimed, {counts.acked} acked: something else runs here")
        done += counts.acked
    cpu = (cpu_seconds(pid) if pid else 0.0) - cpu_before
    after = session_status(store)
    per_check = {name: (after[name] - before[name]) / done for name in COUNTERS}
    walls = {f"{step} wall us/check": took / done * 1e6 for step, took in spent.items()}
    return per_check | walls | {"mariadbd CPU us/check": cpu / done * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--checks", type=int, default=50_000, help="checks per round (<= --users)")
    parser.add_argument("--batch", type=int, default=2000, help="rows per claim, start and ack")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    use_bench_namespace()
    src = demo_data.source(10.0, args.batch, "rows")
    settings = load_settings().model_copy(update={"sources": [src]})
    check_namespace(settings)
    with exclusive(settings):
        demo_data.prepare(settings.mysql, args.users, src.period_s, lambda n: None)
        migrate.apply(settings)
        store = SourceStore(Database(settings.mysql), src)
        store.verify()
        try:
            rounds = [one_round(settings, store, args.batch, args.checks) for _ in range(args.rounds)]
        finally:
            store.close()
    report(rounds, args)
    return 0


def report(rounds: list[dict[str, float]], args: argparse.Namespace) -> None:
    print(f"row mode, {args.users:,} users, {args.checks:,} checks a round, batches of {args.batch:,}")
    print("per check (median of the rounds; the rounds)")
    for counter in rounds[0]:
        values = [r[counter] for r in rounds]
        shown = ", ".join(f"{v:,.3f}" for v in values)
        print(f"  {counter:24s} {statistics.median(values):12,.3f}   ({shown})")


if __name__ == "__main__":
    sys.exit(main())
