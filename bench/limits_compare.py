"""bench/limits.py --compare-idle: same-run pairs of the re-scan with no limit and with a limit that
never binds, the order alternating between runs, and their ratios (issue 27: such a limit costs at
most 5% of the re-scan)."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

IDLE_RATE = 10_000_000.0  # the most a rate may be: never reached here


def compare_idle(
    run: Callable[[float | None], dict[str, Any]], args: argparse.Namespace, console: Console
) -> list[dict[str, Any]]:
    """args.runs pairs {"none": run(None), "idle": run(IDLE_RATE)}; odd pairs run the idle case first,
    so a machine that slows down (or warms up) over the session weighs on both alike."""
    pairs = []
    for i in range(args.runs):
        order: list[tuple[str, float | None]] = [("none", None), ("idle", IDLE_RATE)]
        if i % 2:
            order.reverse()
        pair: dict[str, Any] = {}
        for case, rate in order:
            console.rule(f"pair {i + 1}/{args.runs}: limit {case}")
            pair[case] = run(rate)
        pairs.append(pair)
    return pairs


def ratios(pair: dict[str, Any]) -> tuple[float, float]:
    """(checks/s with the idle limit / without, CPU per check with / without)."""
    none, idle = pair["none"], pair["idle"]
    rate = idle["checks_per_s"] / none["checks_per_s"] if none["checks_per_s"] else float("nan")
    cpu = idle["cpu_per_check_us"] / none["cpu_per_check_us"] if none["cpu_per_check_us"] else float("nan")
    return rate, cpu


def pairs_table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(
        title=f"a limit that never binds ({IDLE_RATE:,.0f}/s): {args.users:,} users every {args.period:g} s, "
        f"start {args.start}, {args.seconds:g} s per run, {args.runs} same-run pairs, order alternating"
    )
    for col in (
        "mode",
        "workers",
        "checks/s none / idle (pairs)",
        "ratio checks/s (pairs)",
        "median ratio",
        "CPU µs/check none / idle (pairs)",
        "median CPU ratio",
    ):
        t.add_column(col, justify="right")
    for r in results:
        pairs = r["pairs"]
        got = [ratios(p) for p in pairs]
        t.add_row(
            r["mode"],
            str(r["workers"]),
            ", ".join(f"{p['none']['checks_per_s']:,.0f} / {p['idle']['checks_per_s']:,.0f}" for p in pairs),
            ", ".join(f"{g[0]:.3f}" for g in got),
            f"{statistics.median(g[0] for g in got):.3f}",
            ", ".join(
                f"{p['none']['cpu_per_check_us']:.1f} / {p['idle']['cpu_per_check_us']:.1f}" for p in pairs
            ),
            f"{statistics.median(g[1] for g in got):.3f}",
        )
    return t
