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
from ..shared.inflight import RATE_ROUNDS, ROUND_S, Round, first_window, lowering, next_window, still_waiting
from ..shared.policy import pop_room
from .flight import RAN_OUT, Flight, Outcome

log = logging.getLogger("duecast.worker")


class Tally:
    """One source's outcomes in the current round: of rows started since its window's last cut (they
    decide), and of rows started before (counted, reported: shared.inflight.Round)."""

    def __init__(self) -> None:
        self.ok = self.failed = self.timed_out = self.peak = self.served = 0
        self.earlier_ok = self.earlier_failed = self.earlier_timed_out = 0
        self.latency_sum_s = 0.0
        self.timed_out_after_s: float | None = None

    def add(self, pairs: Sequence[tuple[int, Outcome]], took_s: float, *, earlier: bool) -> None:
        """Outcomes of one flight's rows, which all took `took_s`. A call skipped because its lease
        ran out (RAN_OUT) says nothing about the service called: not counted."""
        ok = timed_out = failed = 0
        for _, outcome in pairs:  # one pass: this runs for every outcome of an adaptive source
            if isinstance(outcome, Ack):
                ok += 1
            elif isinstance(outcome, TimeoutError):  # duecast's TimedOut, asyncio's or a client's own
                timed_out += 1
            elif outcome is not RAN_OUT:
                failed += 1
        self.served += ok  # the service's rate, whichever window the rows started under
        if earlier:
            self.earlier_ok += ok
            self.earlier_failed += failed
            self.earlier_timed_out += timed_out
        else:
            self.ok += ok
            self.failed += failed
            self.timed_out += timed_out
            self.latency_sum_s += ok * took_s  # rows started under a bigger window waited longer
        if timed_out:  # the client's time limit, whenever its row started
            shortest = self.timed_out_after_s
            self.timed_out_after_s = took_s if shortest is None else min(shortest, took_s)

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
            self.earlier_ok,
            self.earlier_failed,
            self.earlier_timed_out,
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
        earlier = flight.started < window.cut_at  # started under the old window: already acted on
        self.tallies[flight.source].add(pairs, now - flight.started, earlier=earlier)

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
            note = lowering(before, after, r)
            if note is not None:
                log.info(
                    "in-flight window of %s lowered %s",
                    source,
                    note,
                    extra={"event": "worker.window_lowered", "source": source, "count": after.limit},
                )

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
