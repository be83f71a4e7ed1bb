"""cli/web/charts.py: SVG line charts drawn on the server; escaped, gap-aware, scaled."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from duecast.cli.web.charts import Series, line_chart

NOW = 1_000_000.0
SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    text = str.replace(str(svg), "<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    return ET.fromstring(text)  # noqa: S314 - our own output, under test


def test_fewer_than_two_values_is_a_placeholder() -> None:
    root = parse(line_chart([Series("a", [(NOW, 1.0), (NOW + 1, None)])], title="t", now=NOW + 1))
    assert root.get("data-points") == "1"
    assert root.find(f"{SVG}polyline") is None
    assert "collecting data" in "".join(root.itertext())


def test_each_series_is_a_line_and_a_gap_splits_it() -> None:
    a = Series("a", [(NOW - 3, 1.0), (NOW - 2, 2.0), (NOW - 1, None), (NOW, 4.0), (NOW + 1, 5.0)])
    b = Series("b", [(NOW - 3, 0.0), (NOW + 1, 0.0)])
    root = parse(line_chart([a, b], title="t", now=NOW + 1))
    lines = root.findall(f"{SVG}polyline")
    assert [(line.get("data-series"), len((line.get("points") or "").split())) for line in lines] == [
        ("a", 2),
        ("a", 2),
        ("b", 2),
    ]
    assert root.get("data-points") == "6"


def test_the_y_axis_starts_at_zero_and_ends_at_a_round_number_above_the_maximum() -> None:
    svg = line_chart([Series("a", [(NOW - 1, 3.0), (NOW, 730.0)])], title="t", now=NOW)
    labels = re.findall(r'class="axis"[^>]*text-anchor="end">([^<]*)<', svg)
    assert labels[:3] == ["0", "500", "1,000"]
    line = re.search(r'<polyline[^>]* points="([^"]*)"', svg)
    assert line is not None
    ys = [float(p.split(",")[1]) for p in line.group(1).split()]
    assert ys == [159.6, 52.0]  # 3 and 730 of 1,000 on a plot from y=160 (0) up to y=12 (1,000)


def test_names_and_labels_are_escaped() -> None:
    svg = line_chart(
        [Series("<script>x</script>", [(NOW - 1, 1.0), (NOW, 2.0)])],
        title='"><b>',
        now=NOW,
        fmt=lambda v: "<i>",
    )
    assert "<script>" not in svg
    assert "<b>" not in svg
    assert "<i>" not in svg
    parse(svg)  # still well-formed XML


def test_the_time_axis_ends_at_now() -> None:
    svg = line_chart([Series("a", [(NOW - 600, 1.0), (NOW - 300, 2.0)])], title="t", now=NOW)
    assert ">-10m<" in svg
    assert ">now<" in svg
