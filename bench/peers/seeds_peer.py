"""The seeds' pure-MySQL queue on the peer workload: INSERT N jobs, drain with W `seeds_worker.py` processes.

`--variant last_insert_id` is seed 004's claim (one row per UPDATE), `--variant owner_batch` seeds
000/001's (100 rows per UPDATE). Same enqueue and same COUNT(*) drain clock as duecast; no Redis.
"""

from __future__ import annotations

import re
import sys
import time
from contextlib import closing

from harness import Workers, elapsed, emit, exact_backlog, mysql_backlog, parse_args, time_drain
from seeds_worker import DDL, TABLE, connect

ENQUEUE_BATCH = 10_000  # rows per INSERT, one transaction each: exactly duecast's enqueue
VARIANTS = ("owner_batch", "last_insert_id")
RETRIED = re.compile(r"(\d+) deadlocked statements retried")


def enqueue(jobs: int) -> float:
    conn = connect(autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
            cur.execute(DDL)
        started = time.monotonic()
        for lo in range(0, jobs, ENQUEUE_BATCH):
            n = min(ENQUEUE_BATCH, jobs - lo)
            values = ",".join(["(%s, %s, NOW(6))"] * n)
            with conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO {TABLE} (task, payload, run_at) VALUES {values}", ["noop", "{}"] * n
                )
            conn.commit()
        return elapsed(started)
    finally:
        conn.close()


def deadlocks_retried(workers: Workers) -> int:
    """Summed from the workers' exit lines ("..., N deadlocked statements retried")."""
    found = (RETRIED.search(workers.log(name).read_text(errors="replace")) for name in workers.procs)
    return sum(int(m.group(1)) for m in found if m)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv, variants=VARIANTS)
    enqueue_s = enqueue(opts.jobs)
    workers = Workers(opts.log_dir)
    with closing(connect(autocommit=True)) as poll:
        started = time.monotonic()
        for i in range(opts.workers):
            workers.start(f"seeds-{i + 1}", [sys.executable, "seeds_worker.py", opts.variant])
        try:
            result = time_drain(mysql_backlog(poll, TABLE), opts.jobs, started, opts.timeout_s, workers)
        finally:
            workers.stop()
        result = exact_backlog(result, poll, TABLE)
        with poll.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
    claim = {
        "last_insert_id": "UPDATE ... SET owner, id = LAST_INSERT_ID(id) WHERE owner IS NULL LIMIT 1; "
        "SELECT ... WHERE id = LAST_INSERT_ID(); DELETE",
        "owner_batch": "UPDATE ... SET owner = CONNECTION_ID() WHERE owner IS NULL LIMIT 100; "
        "SELECT ... WHERE owner = CONNECTION_ID(); DELETE ... WHERE id IN (...)",
    }[opts.variant]
    emit(
        enqueue_s,
        result,
        {
            "enqueue": f"INSERT of {ENQUEUE_BATCH:,} rows per statement and transaction (PyMySQL)",
            "processes": f"{opts.workers} x seeds_worker.py {opts.variant}",
            "claim": claim,
            "session": "autocommit per statement, READ COMMITTED",
            "deadlocks_retried": deadlocks_retried(workers),
        },
        *workers.errors(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
