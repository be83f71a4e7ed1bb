"""cli/history.py: rates from counter deltas between readings, chart points, a bounded buffer."""

from __future__ import annotations

from duecast.cli.history import History, Reading
from duecast.shared.monitor.freshness import Freshness
from duecast.shared.monitor.status import SourceSnapshot
from duecast.shared.storage.source_store import SourceStatus


def snap(name: str, acked: int, due: int = 0, age: float | None = 5.0) -> SourceSnapshot:
    return SourceSnapshot(
        name, SourceStatus(due, 1, age), 0, {"acked": acked, "claimed": acked}, Freshness(9.0, 0.5)
    )


def test_rates_are_counter_deltas_per_second_and_a_reset_counts_as_zero() -> None:
    history = History(maxlen=10)
    assert history.current_rates("a") == {}
    history.add(Reading(100.0, (snap("a", 0),)))
    assert history.current_rates("a") == {}
    history.add(Reading(102.0, (snap("a", 500),)))
    assert history.current_rates("a")["acked"] == 250.0
    history.add(Reading(104.0, (snap("a", 20),)))  # Redis flushed: the counter started again
    assert history.current_rates("a")["acked"] == 0.0


def test_series_has_a_point_per_reading_with_lag_backlog_and_freshness() -> None:
    history = History(maxlen=10)
    history.add(Reading(1.0, (snap("a", 0, due=7, age=-3.0), snap("b", 0))))
    history.add(Reading(2.0, (snap("a", 10, due=2, age=None),)))  # b could not be read this time
    history.add(Reading(3.0, (snap("a", 10), snap("b", 4))))
    a = list(history.series("a"))
    assert [(p.at, p.backlog, p.lag_s, p.rates.get("acked")) for p in a] == [
        (1.0, 7, 0.0, None),  # nothing due yet: no lag
        (2.0, 2, None, 10.0),
        (3.0, 0, 5.0, 0.0),
    ]
    b = list(history.series("b"))
    assert [p.rates for p in b] == [{}, {}]  # no rate across a missing reading
    assert b[0].fresh_share == 0.5


def test_the_buffer_keeps_the_newest_readings() -> None:
    history = History(maxlen=3)
    for t in range(10):
        history.add(Reading(float(t), ()))
    assert [r.at for r in history.readings()] == [7.0, 8.0, 9.0]
    assert len(history) == 3
