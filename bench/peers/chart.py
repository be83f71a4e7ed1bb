"""Draw the peer comparison as a PNG: enqueue and drain jobs/s per system, medians, log scale.

Runs in .bench-venv (matplotlib is not a duecast dependency): `chart.py RESULTS.json OUT.png`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend is chosen


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: chart.py RESULTS.json OUT.png", file=sys.stderr)
        return 2
    data = json.loads(Path(args[0]).read_text())
    rows = list(reversed(data["summary"]))  # top to bottom as in the table
    labels = [data["systems"][r["system"]]["label"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.55 * len(rows) + 1.8), sharey=True)
    for ax, key, title in ((axes[0], "enqueue_per_s", "enqueue"), (axes[1], "drain_per_s", "drain")):
        values = [r[key] or 0 for r in rows]
        colors = ["#d62728" if r["system"].startswith("duecast") else "#1f77b4" for r in rows]
        bars = ax.barh(labels, values, color=colors)
        ax.set_xscale("log")
        ax.set_title(f"{title} jobs/s (median, log scale)")
        ax.grid(axis="x", which="both", alpha=0.3)
        for bar, row, v in zip(bars, rows, values, strict=True):
            cut = "*" if key == "drain_per_s" and row["cut_short"] else ""
            ax.text(v, bar.get_y() + bar.get_height() / 2, f" {v:,.0f}{cut}", va="center", fontsize=9)
        ax.set_xlim(right=max(values) * 6)
    m = data["machine"]
    fig.suptitle(data["title"], fontsize=11)
    fig.text(
        0.01,
        0.01,
        f"{m['date']}; {m['nproc']} CPUs; MariaDB {m['mariadb']}; Redis {m['redis']}; "
        "* drain cut short: rate of the jobs done in the time limit",
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(args[1], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
