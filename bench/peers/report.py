"""Turn the drivers' result lines into rates, medians and ratios, and render them as a rich table.

Pure functions over plain dicts (the JSON file holds the same dicts); no I/O here.
"""

from __future__ import annotations

import statistics
from typing import Any

from rich.table import Table

Raw = dict[str, Any]  # one driver's result line, plus "error" when the driver itself failed
NOISY_SPREAD = 0.25  # (max - min) / median of a system's drain runs above this: flag the result
BUSY_LOAD = 1.0  # 1-minute load average before we start anything: above it, others were running


def rates(raw: Raw, jobs: int) -> Raw:
    """One run of one system: enqueue and drain jobs/s (a drain cut short counts the jobs it did)."""
    if raw.get("error"):
        return {"ok": False, "error": raw["error"]}
    done = jobs - int(raw["remaining"])
    first = raw["first_progress_s"]
    return {
        "ok": not raw["errors"],
        "enqueue_per_s": jobs / raw["enqueue_s"] if raw["enqueue_s"] > 0 else None,
        "drain_per_s": done / raw["drain_s"] if raw["drain_s"] > 0 else None,
        # Without the workers' start-up: from the first job done to the last (what a warm fleet does).
        "steady_per_s": done / (raw["drain_s"] - first) if first and raw["drain_s"] > first else None,
        "done": done,
        # MariaDB's CPU per job drained, in µs: what a MySQL-backed system costs the database.
        "mariadb_us_per_job": _per_job(raw.get("mariadb_cpu_s"), done),
        "cut_short": bool(raw["timed_out"]),
        "first_progress_s": raw["first_progress_s"],
        "errors": raw["errors"],
        "shutdown_errors": raw.get("shutdown_errors", []),
    }


def _per_job(cpu_s: float | None, done: int) -> float | None:
    return 1e6 * cpu_s / done if cpu_s and done else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(names: list[str], runs: list[dict[str, Raw]], baseline: str = "duecast") -> list[Raw]:
    """Per system: its runs, median enqueue/drain jobs/s, and the median of its per-run drain ratio
    to the baseline (both measured in the same run, so a noisy run moves both)."""
    out = []
    for name in names:
        mine = [run[name] for run in runs if name in run]
        drains = [r.get("drain_per_s") for r in mine]
        ratios: list[float | None] = [
            run[name]["drain_per_s"] / run[baseline]["drain_per_s"]
            for run in runs
            if run.get(name, {}).get("drain_per_s") and run.get(baseline, {}).get("drain_per_s")
        ]
        med = _median(drains)
        present = [d for d in drains if d]
        spread = (max(present) - min(present)) / med if med and len(present) > 1 else 0.0
        out.append(
            {
                "system": name,
                "runs": mine,
                "enqueue_per_s": _median([r.get("enqueue_per_s") for r in mine]),
                "drain_per_s": med,
                "drain_ratio_to_duecast": _median(ratios),
                "first_job_s": _median([r.get("first_progress_s") for r in mine]),
                "steady_per_s": _median([r.get("steady_per_s") for r in mine]),
                "mariadb_us_per_job": _median([r.get("mariadb_us_per_job") for r in mine]),
                "drain_spread": spread,
                "cut_short": any(r.get("cut_short") for r in mine),
                "failed": any(not r.get("ok") for r in mine),
                "shutdown_errors": any(r.get("shutdown_errors") for r in mine),
            }
        )
    return out


def vs_best_peer(runs: list[dict[str, Raw]], baseline: str, peers: list[str]) -> float | None:
    """The median over runs of the baseline's drain over the best peer's drain in that same run."""
    ratios: list[float | None] = []
    for run in runs:
        best = max((run[p].get("drain_per_s") or 0.0 for p in peers if p in run), default=0.0)
        mine = run.get(baseline, {}).get("drain_per_s")
        ratios.append(mine / best if mine and best else None)
    return _median(ratios)


def line(r: Raw) -> str:
    """One system's run, as the runner prints it while it goes."""
    if "error" in r:
        return f"[red]failed[/red]: {r['error']}"
    cut = " (cut short)" if r["cut_short"] else ""
    errs = f" [red]errors[/red]: {r['errors'][:2]}" if r["errors"] else ""
    return (
        f"enqueue {num(r['enqueue_per_s'])}/s, drain {num(r['drain_per_s'])}/s{cut}, "
        f"first job done at {r['first_progress_s'] or 0:.1f} s{errs}"
    )


def noise_warnings(facts: dict[str, Any], summary: list[Raw]) -> list[str]:
    """Signs that other work on the machine disturbed the numbers."""
    out = []
    load = facts["loadavg_at_start"][0]
    if load > BUSY_LOAD:
        out.append(f"the machine was busy before the benchmark started (load average {load:.2f})")
    noisy = [row["system"] for row in summary if row["drain_spread"] > NOISY_SPREAD]
    if noisy:
        out.append(f"drain runs spread more than {NOISY_SPREAD:.0%} for: {', '.join(noisy)}")
    return out


def num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def notes(row: Raw, jobs: int) -> str:
    out = []
    if row["cut_short"]:
        done = ", ".join(_thousands(r.get("done", 0)) for r in row["runs"])
        out.append(f"cut short; done: {done} of {_thousands(jobs)}")
    if row["failed"]:
        out.append("errors: see JSON")
    if row["shutdown_errors"]:
        out.append("errors at shutdown, after the clock stopped: see JSON")
    if row["drain_spread"] > NOISY_SPREAD:
        out.append(f"runs spread {row['drain_spread']:.0%}")
    return "; ".join(out)


def _thousands(n: int) -> str:
    return f"{n / 1000:,.0f}k" if n >= 10_000 else f"{n:,}"


COLUMNS = (
    ("system", "left"),
    ("enqueue jobs/s", "right"),
    ("drain jobs/s", "right"),
    ("drain vs duecast", "right"),  # the workload's first duecast system
    ("first job done (s)", "right"),
    ("drain jobs/s after first job", "right"),
    ("drain jobs/s per run", "right"),
    ("MariaDB CPU µs/job", "right"),
    ("notes", "left"),
)


def cells(row: Raw, label: str, jobs: int) -> list[str]:
    ratio = row["drain_ratio_to_duecast"]
    first = row["first_job_s"]
    return [
        label,
        num(row["enqueue_per_s"]),
        num(row["drain_per_s"]),
        "-" if ratio is None else f"{ratio:.2f}x",
        "-" if first is None else f"{first:.1f}",
        num(row["steady_per_s"]),
        ", ".join(num(r.get("drain_per_s")) for r in row["runs"]),
        "-" if row.get("mariadb_us_per_job") is None else f"{row['mariadb_us_per_job']:.0f}",
        notes(row, jobs),
    ]


def table(summary: list[Raw], labels: dict[str, str], title: str, jobs: int) -> Table:
    t = Table(title=title)
    for col, justify in COLUMNS:
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in summary:
        t.add_row(*cells(row, labels[row["system"]], jobs))
    return t


def markdown(summary: list[Raw], labels: dict[str, str], jobs: int) -> str:
    """The same table as Markdown, for bench/peers/README.md."""
    lines = [
        "| " + " | ".join(c for c, _ in COLUMNS) + " |",
        "|" + "|".join("---" if j == "left" else "--:" for _, j in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(cells(row, labels[row["system"]], jobs)) + " |" for row in summary]
    return "\n".join(lines)
