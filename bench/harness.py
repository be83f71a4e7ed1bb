"""What every bench/ script needs around a run: its own namespace, one run at a time, JSON and charts.

Nothing here measures anything. It must never touch a database or key prefix outside the
benchmark namespace (`duecast_bench*` / `duecast-bench*`), and never the whole Redis server.
"""

from __future__ import annotations

import compileall
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import duecast
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.settings import Settings, load_settings
from duecast.shared.storage.db import connect

DATABASE = "duecast_bench"
KEY_PREFIX = "duecast-bench"
_NAMESPACE = {"DUECAST_MYSQL__DATABASE": DATABASE, "DUECAST_REDIS__KEY_PREFIX": KEY_PREFIX}
# `scripts/dev shell` always exports its own dev namespace (duecast_dev_<checkout hash>,
# duecast-dev-<checkout hash>); that is its default, not a user's choice.
_DEV_DEFAULTS = {
    "DUECAST_MYSQL__DATABASE": re.compile(r"duecast_dev(_[0-9a-f]{8})?"),
    "DUECAST_REDIS__KEY_PREFIX": re.compile(r"duecast-dev(-[0-9a-f]{8})?"),
}


def use_bench_namespace() -> None:
    """Point settings (ours and every child's) at duecast_bench / duecast-bench unless the user chose
    another namespace. Call before load_settings()."""
    for var, bench in _NAMESPACE.items():
        if os.environ.get("DUECAST_DEV") == "1" and _DEV_DEFAULTS[var].fullmatch(os.environ.get(var, "")):
            del os.environ[var]
        os.environ.setdefault(var, bench)


def check_namespace(settings: Settings) -> None:
    """Refuse to run outside the benchmark namespace: benchmarks truncate tables and delete keys."""
    if not settings.mysql.database.startswith(DATABASE) or not settings.redis.key_prefix.startswith(
        KEY_PREFIX
    ):
        raise SystemExit(
            f"benchmarks only run in database {DATABASE}* with key prefix {KEY_PREFIX}*, not "
            f"{settings.mysql.database} / {settings.redis.key_prefix}"
        )


@contextmanager
def exclusive(settings: Settings) -> Iterator[None]:
    """Hold a server-wide named lock for the run: two benchmarks in one namespace would share tables
    and Redis lists and measure each other. The lock goes with the connection."""
    conn = connect(settings.mysql, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 0)", (f"{settings.mysql.database}:bench",))
            row = cur.fetchone()
        if not row or row[0] != 1:
            raise SystemExit(
                f"another benchmark is running in database {settings.mysql.database}; "
                "run them one at a time (or give this one its own DUECAST_MYSQL__DATABASE=duecast_bench_x "
                "and DUECAST_REDIS__KEY_PREFIX=duecast-bench-x)"
            )
        yield
    finally:
        conn.close()


def clear_keys(settings: Settings, sources: Sequence[str]) -> None:
    """Delete this namespace's lists, bells and counters for `sources` (and the wake-up list)."""
    keys = Keys(settings.redis.key_prefix)
    client = connect_redis(settings.redis)
    try:
        names = [k(s) for s in sources for k in (keys.ready, keys.bell, keys.stats, keys.quarantine)]
        client.delete(*names, keys.wake())
    finally:
        client.close()


# The folders pyproject.toml packages (and the root's own modules): what a role process imports.
PACKAGED = ("cli", "dispatcher", "examples", "integrations", "shared", "worker")


def compile_bytecode() -> None:
    """Write duecast's bytecode (__pycache__, git-ignored) before a clock starts, as `pip install`
    does for an installed package and did for every peer's. A checkout run with
    PYTHONDONTWRITEBYTECODE=1 (this machine's environment) otherwise compiles its ~110 modules
    again in every process it starts: about 70 ms of CPU each, which no installed duecast pays."""
    root = Path(duecast.__file__).resolve().parent  # the checkout the processes will import
    compileall.compile_dir(root, maxlevels=0, quiet=1)
    for part in PACKAGED:
        compileall.compile_dir(root / part, quiet=1)


def remove_bytecode() -> None:
    """Delete what compile_bytecode wrote: with PYTHONDONTWRITEBYTECODE=1, every process then compiles
    duecast from source, as a checkout run in this machine's environment does (a cold start measured
    both ways, bench/cold_start.py --from-source)."""
    root = Path(duecast.__file__).resolve().parent
    caches = [root / "__pycache__", *(p for part in PACKAGED for p in (root / part).rglob("__pycache__"))]
    for cache in caches:
        shutil.rmtree(cache, ignore_errors=True)


class ReportConsole(Console):
    """A Console whose tables fold a cell that does not fit its column onto the next line: rich's
    default cuts it, and a figure shown as "105,7…" reads as a number it is not."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        for obj in objects:
            if isinstance(obj, Table):
                for column in obj.columns:
                    column.overflow = "fold"
        super().print(*objects, **kwargs)


def report_console() -> Console:
    """Where result tables go: stdout, wide enough for every column when it is not a terminal."""
    return ReportConsole() if sys.stdout.isatty() else ReportConsole(width=160)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of already sorted values (nan when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"results written to {path}", file=sys.stderr)


def chart_backend(path: Path | None) -> Any | None:
    """matplotlib.pyplot on the Agg backend, or None (with a message) when there is no chart to draw.

    matplotlib is not a duecast dependency: it is checked before the run, so a long run is never
    wasted on a chart that cannot be drawn, and the table and JSON are written either way.
    """
    if path is None:
        return None
    try:
        import matplotlib  # noqa: PLC0415 (optional: only --chart needs it)
    except ImportError:
        print(
            f"--chart {path}: matplotlib is not installed, so no chart will be drawn; install the "
            "bench extra (`.venv/bin/pip install -e '.[bench]'`) or `pip install matplotlib`",
            file=sys.stderr,
        )
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (after the backend is chosen)

    return plt


def save_chart(plt: Any, fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"chart written to {path}", file=sys.stderr)


def run_and_report(
    args: Any,
    run: Callable[[Settings, Any], list[dict[str, Any]]],
    table: Callable[[Any, list[dict[str, Any]]], Any],
) -> int:
    """A benchmark's main, after its arguments: in the bench namespace, one at a time, then its table
    printed and, with --json, its results written."""
    use_bench_namespace()
    settings = load_settings()
    check_namespace(settings)
    with exclusive(settings):
        results = run(settings, args)
    report_console().print(table(args, results))
    if args.json:
        write_json(args.json, {"args": vars(args), "results": results})
    return 0
