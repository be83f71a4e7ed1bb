"""The worker's in-flight window per source: fed by each flight's outcomes as they come, judged once
per round by shared.inflight.next_window, and read by the tick to decide what it may pop.

Only sources whose handler may await (`async def`) adapt: a plain handler's calls are bounded by the
worker's threads already. The others keep the worker's fixed cap.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence

from ..shared.acks import Ack
from ..shared.inflight import RATE_ROUNDS, ROUND_S, Round, Window, first_window, next_window, still_waiting
from ..shared.policy import pop_room
from .flight import Flight, Outcome

log = logging.getLogger("duecast.worker")


class Tally:
    """One source's outcomes in the current round (rows started since its window's last cut)."""

    def __init__(self) -> None:
        self.ok = self.failed = self.timed_out = self.peak = self.served = 0
        self.latency_sum_s = 0.0
        self.timed_out_after_s: float | None = None

    def round(self, waiting_s: float | None, served_per_s: float) -> Round:
        latency = self.latency_sum_s / self.ok if self.ok else None
        return Round(
            self.ok,
            self.failed,
            self.timed_out,
            latency,
            self.timed_out_after_s,
            self.peak,
            waiting_s,
            served_per_s,
        )


class Windows:
    """Per-source windows under the worker's cap (`ceiling`: worker.max_in_flight or its default)."""

    def __init__(self, adaptive: Mapping[str, float], ceiling: int, pop_batch: int, now: float) -> None:
        """`adaptive`: the sources that adapt, each with its time limit (timeout_s)."""
        self.ceiling = ceiling
        self.pop_batch = pop_batch
        self.windows = {s: first_window(ceiling, t) for s, t in adaptive.items()}
        self.tallies: dict[str, Tally] = {s: Tally() for s in self.windows}
        self.rates = {s: deque[float](maxlen=RATE_ROUNDS) for s in self.windows}  # served/s, per round
        self.round_at = now

    def limit(self, source: str) -> int:
        window = self.windows.get(source)
        return self.ceiling if window is None else window.limit

    def record(self, flight: Flight, pairs: Sequence[tuple[int, Outcome]], now: float) -> None:
        """Outcomes that just came for `flight`; its rows all started when it did."""
        window = self.windows.get(flight.source)
        if window is None:
            return
        tally, took_s = self.tallies[flight.source], now - flight.started
        ok = sum(isinstance(outcome, Ack) for _, outcome in pairs)
        tally.served += ok  # the service's rate, whichever window the rows started under
        if flight.started < window.cut_at:
            return  # started under the old window: what they say is already acted on
        timed_out = 0
        for _, outcome in pairs:
            if isinstance(outcome, TimeoutError):  # duecast's TimedOut, asyncio's or a client's own
                timed_out += 1
            elif not isinstance(outcome, Ack):
                tally.failed += 1
        tally.ok += ok
        tally.latency_sum_s += ok * took_s
        if timed_out:
            tally.timed_out += timed_out
            shortest = tally.timed_out_after_s
            tally.timed_out_after_s = took_s if shortest is None else min(shortest, took_s)

    def saw(self, in_flight: Mapping[str, int]) -> None:
        """Each source's rows in flight now (after a start too: quick calls may end before a tick)."""
        for source, tally in self.tallies.items():
            tally.peak = max(tally.peak, in_flight.get(source, 0))

    def judge(self, now: float, in_flight: Mapping[str, int], flights: Sequence[Flight]) -> None:
        """Note each source's rows in flight; once a round is over, move every window."""
        self.saw(in_flight)
        round_s = now - self.round_at
        if round_s < ROUND_S:
            return
        self.round_at = now
        for source, tally in self.tallies.items():
            before = self.windows[source]
            waiting = [
                now - f.started
                for f in flights
                if f.source == source and f.started >= before.cut_at and still_waiting(f.left, len(f.rows))
            ]
            rates = self.rates[source]
            rates.append(tally.served / round_s)
            r = tally.round(max(waiting, default=None), max(rates))
            after = next_window(before, r, now, self.ceiling)
            self.windows[source] = after
            self.tallies[source] = Tally()
            if after.cut_at != before.cut_at:
                log_lowered(source, tally, after)

    def rooms(self, cap_rooms: Mapping[str, int], in_flight: Mapping[str, int]) -> dict[str, int]:
        """Rows each source may pop now, within its room under the worker's cap `cap_rooms`
        (shared.inflight.fair_rooms) and its own window (shared.policy.pop_room per window: none
        until a quarter of a batch, or of a small window, fits)."""
        rooms = {}
        for source, cap_room in cap_rooms.items():
            room = min(cap_room, pop_room(self.limit(source), in_flight.get(source, 0), self.pop_batch))
            if room > 0:
                rooms[source] = room
        return rooms


def log_lowered(source: str, tally: Tally, after: Window) -> None:
    """One line per lowering (at most one per round): why, and the window it leaves."""
    calls = tally.ok + tally.failed + tally.timed_out
    why = (
        f"{tally.timed_out} of {calls} calls timed out, {tally.failed} failed"
        if tally.timed_out or tally.failed
        else f"calls wait near their time limit (~{after.timeout_s:.3g}s)"
    )
    log.info(
        "in-flight window of %s lowered to %d rows: %s",
        source,
        after.limit,
        why,
        extra={"event": "worker.window_lowered", "source": source, "count": after.limit},
    )
