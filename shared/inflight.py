"""Pure in-flight window decisions: how many rows of one source a worker keeps awaiting, adapted to
what the service its checks call can take (no I/O, no clocks: the worker passes outcomes and time).

The rule, judged once per round of ROUND_S over the outcomes of rows started since the last
decrease (AIMD, with Little's law to size a decrease). Outcomes of rows started before it are counted
and reported but decide nothing: the congestion they show was acted on, and one episode is one
decrease (a 5 s time-out ends ten rounds after its row started, past any cut in between):

- time-outs (TIMEOUT_SHARE of the round or more) or errors (ERROR_SHARE or more) halve the window
  (CUT);
- else a latency past SLOW x the calls' time limit eases it (EASE), before its calls time out;
- either decrease goes further, to what the service took (its best successful calls a second of
  the last RATE_ROUNDS rounds x FAST x the time limit), when that is less: a window far too big
  fits in one step;
- a decrease that lowers nothing (the window is at one row) starts no new episode: the window keeps
  counting the rows started since it last dropped, and nothing is logged;
- a latency under FAST x the limit, with the window used, grows it by a sixteenth, or by 1/STEPS
  of the ceiling when more (a window cut to a few rows by an outage is back within a minute);
- otherwise it holds.

The time limit is learnt: the shortest time a call took to time out, whenever it started (before
any, the source's timeout_s). A round's latency is the mean of its successful calls, or, when
more, the age of the oldest batch with a TAIL of its rows still awaiting: the calls that finish
first are the quick ones, and a batch's last rows wait longest. A window starts at its ceiling,
the worker's cap (`worker.max_in_flight`, or its default): a service that keeps up never sees a
difference, and one that does not is fitted within seconds of its first time-outs. It never goes
below one row.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

ROUND_S = 0.5  # outcomes are judged together per round: one late call is not a trend
CUT = 0.5  # the multiplicative decrease on time-outs and errors
EASE = 0.7  # ...and on latency nearing the time limit
GROWTH = 16  # each round that grows the window adds a sixteenth...
STEPS = 256  # ...or a 256th of its ceiling (at least one row), whichever is more
TIMEOUT_SHARE = 0.01  # time-outs are the client's queue overflowing: a few are enough to cut
ERROR_SHARE = 0.10  # other errors also come from broken rows, which a smaller window cannot fix
TAIL = 0.1  # a batch with this share of its rows still awaiting: its age is its tail's latency
FAST = 0.5  # latency under half the time limit: room to grow
SLOW = 0.75  # latency past three quarters of it: calls are about to time out
RATE_ROUNDS = 4  # the service's rate is the best of this many recent rounds


@dataclass(frozen=True)
class Window:
    limit: int  # rows of this source a worker may keep in flight now
    timeout_s: float  # the calls' time limit as learnt: the shortest time-out seen, or the source's
    cut_at: float = float("-inf")  # when last lowered: outcomes of rows started before decide nothing


@dataclass(frozen=True)
class Round:
    """One round's outcomes of one source: those of rows started since the window's last decrease
    decide; the earlier ones are only counted."""

    ok: int = 0
    failed: int = 0  # failures other than time-outs
    timed_out: int = 0  # duecast's time limit, or the handler's own client (a TimeoutError)
    latency_s: float | None = None  # mean seconds from a successful row's start to its outcome
    timed_out_after_s: float | None = None  # the shortest time a timed-out row took (earlier ones too)
    peak: int = 0  # most rows of the source in flight at once during the round
    waiting_s: float | None = None  # age of the oldest batch still awaiting (still_waiting), at the end
    # The service's rate: the most successful calls a second in one of the last RATE_ROUNDS rounds
    # (of any row, those started before a decrease too: the best recent rate, as a round full of
    # time-outs serves fewer)
    served_per_s: float = 0.0
    # Outcomes of rows started before the window's last decrease: what they show was acted on
    earlier_ok: int = 0
    earlier_failed: int = 0
    earlier_timed_out: int = 0

    @property
    def slowness_s(self) -> float | None:
        """What the round says of its calls' latency: the larger of the two measures."""
        known = [x for x in (self.latency_s, self.waiting_s) if x is not None]
        return max(known) if known else None

    @property
    def total(self) -> int:
        """Calls that decide: of rows started since the window's last decrease."""
        return self.ok + self.failed + self.timed_out

    @property
    def ended(self) -> tuple[int, int, int]:
        """Every call that ended in the round, whenever its row started: (calls, timed out, failed)."""
        timed_out, failed = self.timed_out + self.earlier_timed_out, self.failed + self.earlier_failed
        return self.ok + self.earlier_ok + timed_out + failed, timed_out, failed


def first_window(ceiling: int, timeout_s: float) -> Window:
    """A source starts at the worker's cap: only what its calls say makes the window smaller."""
    return Window(limit=max(1, ceiling), timeout_s=timeout_s)


def still_waiting(left: int, rows: int) -> bool:
    """Whether a batch's age says how long its calls wait: a TAIL of its rows still awaits (one
    hung call in a big batch does not)."""
    return left > 0 and left >= TAIL * rows


def congested(r: Round) -> bool:
    """Whether the round says the service (or the client in front of it) is past what it takes."""
    total = r.total
    if total == 0:
        return False
    return r.timed_out >= TIMEOUT_SHARE * total or r.failed >= ERROR_SHARE * total


def learnt_timeout_s(timeout_s: float, r: Round) -> float:
    """The calls' time limit: a client's own (shorter than the source's) shows in its time-outs. One
    much quicker than the round's successful calls (a connect time-out, say) is not what calls wait for."""
    after = r.timed_out_after_s
    if after is None or after <= 0 or (r.latency_s is not None and after < r.latency_s / 2):
        return timeout_s
    return min(timeout_s, after)


def lowered(limit: int, factor: float, r: Round, timeout_s: float) -> int:
    """`limit` x `factor`, or the window the service's rate fills in FAST x the time limit when less."""
    smaller = limit * factor
    if r.served_per_s > 0:
        smaller = min(smaller, r.served_per_s * FAST * timeout_s)
    return max(1, int(smaller))


def next_window(w: Window, r: Round, now: float, ceiling: int) -> Window:
    """The window after round `r` ended at `now` (see the module's rule); never above `ceiling`."""
    limit = min(w.limit, ceiling)
    timeout_s = learnt_timeout_s(w.timeout_s, r)
    latency = r.slowness_s
    if congested(r) or (latency is not None and latency > SLOW * timeout_s):
        smaller = lowered(limit, CUT if congested(r) else EASE, r, timeout_s)
        # At one row nothing is lowered: the episode goes on, and its rows still count
        return Window(smaller, timeout_s, cut_at=now if smaller < limit else w.cut_at)
    if r.total == 0:  # nothing decides (time-outs of earlier rows still teach the time limit)
        return Window(limit, timeout_s, w.cut_at)
    if (latency is not None and latency > FAST * timeout_s) or 2 * r.peak < limit:
        # Near the limit, or not used (growing it would say nothing about the service): holds.
        return Window(limit, timeout_s, w.cut_at)
    return Window(min(ceiling, limit + max(1, limit // GROWTH, ceiling // STEPS)), timeout_s, w.cut_at)


def lowering(before: Window, after: Window, r: Round) -> str | None:
    """What a round that lowered the window says of it ("from 8 to 4 rows: why", every call that
    ended in the round counted), or None when the limit did not drop: a window held at one row by
    a service failing every call has nothing new to say each round."""
    if after.limit >= before.limit:
        return None
    calls, timed_out, failed = r.ended
    why = (
        f"{timed_out} of {calls} calls timed out, {failed} failed"
        if congested(r)
        else f"calls wait near their time limit (~{after.timeout_s:.3g}s)"
    )
    return f"from {before.limit} to {after.limit} rows: {why}"


def fair_rooms(
    cap: int, in_flight: Mapping[str, int], sources: Sequence[str], pop_batch: int, active: Collection[str]
) -> dict[str, int]:
    """Rows each of `sources` may pop now under the worker's cap, shared fairly (issue 27.8).

    Each source keeps room the others may not fill: an `active` one (rows in flight lately) its
    share, min(cap / sources, pop_batch) rows; any other one pop (a quarter of a share: less is not
    worth its round trip, and pops that small are refused). A source may take what is free beyond
    the others' unused room. So a backlog of slow work (a jobs queue's 2 s tasks) never fills the
    cap: a re-scan beside it pops at once, then has its share; an idle queue costs a busy source one
    small pop's room. Served alone, this is shared.policy.pop_room.
    """
    share = min(max(1, cap // max(1, len(sources))), pop_batch)
    smallest = max(1, share // 4)
    unused = {s: max(0, (share if s in active else smallest) - in_flight.get(s, 0)) for s in sources}
    total = sum(in_flight.values())
    free = cap - total - sum(unused.values())
    rooms = {}
    for source in sources:
        room = min(free + unused[source], pop_batch)
        if room < smallest and not in_flight.get(source) and cap - total >= smallest:
            # A cap smaller than every source's kept room together (a cap of 1 over two queues)
            # would lock them all out: one that runs nothing may still pop into what is free. A pop
            # takes one source's list, so the cap still holds.
            room = smallest
        rooms[source] = room if room >= smallest else 0
    return rooms


def entries_to_pop(room: int, rows_per_entry: int, in_flight: int, *, shared: bool) -> int:
    """Entries to pop for `room` rows when each stands for `rows_per_entry` (a span, a job run).
    Served alone, enough to cover the room (rounded up, as ever). Beside other sources, as many as
    fit, so that a pop never takes their room; one that does not fit only when the source has
    nothing in flight (an entry bigger than any room it gets would never be popped otherwise)."""
    if room <= 0:
        return 0
    if not shared:
        return -(-room // rows_per_entry)
    fits = room // rows_per_entry
    return fits if fits or in_flight else 1
