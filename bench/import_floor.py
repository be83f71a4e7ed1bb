"""Benchmark: what a role's process pays before it can run a line of duecast, in fresh interpreters.

Each statement runs in a new interpreter (`python -c STMT`), the statements taken in turn for
--rounds rounds so that the machine's drift falls on all of them alike; the table gives the median
wall time and CPU (user + system, from the children's rusage) of each. The fixed libraries
(pydantic-settings, redis-py, PyMySQL) alone are the floor under any start-up of a role: issue 28's
"first job done <= 0.2 s" asks for less than that floor on this machine (docs/benchmarks.md,
"Cold start").

    scripts/dev shell python bench/import_floor.py                     # this checkout's .venv
    scripts/dev shell python bench/import_floor.py --python /tmp/wv/bin/python   # e.g. a wheel's venv

No server is needed. duecast's bytecode is compiled first (as `pip install` does), in the tree the
interpreter imports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import report_console
from rich.table import Table

# (what, statement): the interpreter, each fixed library, the least a role needs before its first
# claim (its settings and its MySQL driver), the three together, then the roles.
STATEMENTS = (
    ("the interpreter (site included)", "pass"),
    ("pydantic-settings", "import pydantic_settings"),
    ("redis-py", "import redis"),
    ("PyMySQL", "import pymysql"),
    ("settings and MySQL: what any claim needs", "import pydantic_settings, pymysql"),
    ("the three fixed libraries", "import pydantic_settings, redis, pymysql"),
    ("a worker's imports", "import duecast.worker.main"),
    ("a dispatcher's imports", "import duecast.dispatcher.main"),
)
# Run by the measured interpreter: its duecast's bytecode, as bench/harness.py's compile_bytecode.
COMPILE = """
import compileall, pathlib, duecast
root = pathlib.Path(duecast.__file__).resolve().parent
compileall.compile_dir(root, maxlevels=0, quiet=1)
for part in ("cli", "dispatcher", "examples", "integrations", "shared", "worker"):
    compileall.compile_dir(root / part, quiet=1)
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def once(python: str, statement: str) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh interpreter running `statement`."""
    cpu, wall = children_cpu(), time.perf_counter()
    subprocess.run([python, "-c", statement], check=True)
    return time.perf_counter() - wall, children_cpu() - cpu


def measure(python: str, rounds: int) -> list[dict[str, object]]:
    subprocess.run([python, "-c", COMPILE], check=True)
    samples: dict[str, list[tuple[float, float]]] = {what: [] for what, _ in STATEMENTS}
    for _ in range(rounds):
        for what, statement in STATEMENTS:
            samples[what].append(once(python, statement))
    return [
        {
            "what": what,
            "statement": statement,
            "wall_ms": 1000 * statistics.median(w for w, _ in samples[what]),
            "cpu_ms": 1000 * statistics.median(c for _, c in samples[what]),
        }
        for what, statement in STATEMENTS
    ]


def table(python: str, rounds: int, rows: list[dict[str, object]]) -> Table:
    t = Table(title=f"a fresh interpreter's imports, median of {rounds} ({python})")
    t.add_column("what")
    t.add_column("statement")
    t.add_column("wall (ms)", justify="right")
    t.add_column("CPU (ms)", justify="right")
    for r in rows:
        t.add_row(str(r["what"]), str(r["statement"]), f"{r['wall_ms']:.0f}", f"{r['cpu_ms']:.0f}")
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", default=sys.executable, help="the interpreter to measure (default: this one)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--json", type=Path, help="write the medians here")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if not os.access(args.python, os.X_OK):
        p.error(f"--python {args.python}: not an executable interpreter")
    rows = measure(args.python, args.rounds)
    report_console().print(table(args.python, args.rounds, rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
