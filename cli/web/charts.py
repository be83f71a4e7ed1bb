"""Line charts rendered as inline SVG on the server: no JavaScript library to ship, vendor or update,
and a chart is readable with scripts off. Pure functions; every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from markupsafe import Markup, escape

Value = float | None  # None: no value at that time (a gap in the line)

_W, _H = 640, 200  # the viewBox; the SVG scales to its container
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 12, 40  # plot margins: axis labels left, legend below
_SERIES_CLASSES = 6  # .s0 .. .s5 in style.css; more series reuse them
COLLECTING = "collecting data…"

# A series that means the same on every chart has one colour everywhere (.t-done, .t-failed in
# style.css): work finished in the accent blue, failures in red. Others take .s0.. by position.
Tone = Literal["done", "failed"]


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, Value]]  # (unix time, value), oldest first
    tone: Tone | None = None


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    now: float,
    fmt: Callable[[float], str] = lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}",
    y_max: float | None = None,
    placeholder: str = COLLECTING,
) -> Markup:
    """An SVG line chart of `series` against time, with `fmt` for the y axis labels.

    The y axis starts at 0 and ends at `y_max` or just above the largest value. The x axis spans
    the oldest point to `now`. With fewer than two values it shows `placeholder` instead. The root
    carries data-points (how many values are drawn) for tests.
    """
    values = [v for s in series for _, v in s.points if v is not None]
    times = [t for s in series for t, v in s.points if v is not None]
    drawn = len(values)
    head = (
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" preserveAspectRatio="none" '
        f'data-points="{drawn}" aria-label="{escape(title)}"><title>{escape(title)}</title>'
    )
    if drawn < 2:
        empty = f'<text class="empty" x="{_W / 2}" y="{_H / 2}">{escape(placeholder)}</text></svg>'
        return Markup(head + empty)  # noqa: S704 - the only outside texts (title, placeholder) are escaped
    t0, t1 = min(times), max(now, *times)
    top = y_max if y_max is not None else _nice_ceiling(max(values))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(t: float) -> float:
        return _LEFT + (t - t0) / max(t1 - t0, 1e-9) * plot_w

    def y(v: float) -> float:
        return _TOP + plot_h - min(max(v, 0.0), top) / top * plot_h

    parts = [head]
    for i in range(3):  # horizontal grid lines at 0, half and top, with their labels
        v = top * i / 2
        parts.append(f'<line class="grid" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>')
        parts.append(
            f'<text class="axis" x="{_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{escape(fmt(v))}</text>'
        )
    for t, anchor in ((t0, "start"), (t1, "end")):
        label = "now" if t == t1 and t1 >= now else f"-{_ago(now - t)}"
        at = f'x="{x(t):.1f}" y="{_TOP + plot_h + 16}" text-anchor="{anchor}"'
        parts.append(f'<text class="axis" {at}>{label}</text>')
    for i, s in enumerate(series):
        cls = f"t-{s.tone}" if s.tone else f"s{i % _SERIES_CLASSES}"
        for run in _runs(s.points):
            pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in run)
            parts.append(f'<polyline class="line {cls}" data-series="{escape(s.name)}" points="{pts}"/>')
        lx = _LEFT + i * 150
        parts.append(f'<rect class="key {cls}" x="{lx}" y="{_H - 12}" width="10" height="4"/>')
        parts.append(f'<text class="legend" x="{lx + 14}" y="{_H - 8}">{escape(s.name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers, fixed text, and escaped names only


def _runs(points: Sequence[tuple[float, Value]]) -> list[list[tuple[float, float]]]:
    """The points split at gaps (None), so a missing reading is not drawn as a straight line."""
    runs: list[list[tuple[float, float]]] = [[]]
    for t, v in points:
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((t, v))
    return [r for r in runs if r]


def _nice_ceiling(v: float) -> float:
    """1, 2 or 5 times a power of ten, at or above v (and above 0)."""
    if v <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(v))
    return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= v)


def _ago(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"
