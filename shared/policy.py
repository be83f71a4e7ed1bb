"""Pure pacing, backoff and fencing decisions: no I/O, no clocks, exhaustively unit-tested.

Roles ask these functions how much to claim and how long to sleep (SQL adds the delays it stores),
and lease keepers when to renew and when their process must stop; callers pass the time in.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Collection, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Literal


def claim_room(list_length: int, high_water: int, batch: int) -> int:
    """How many rows the dispatcher may claim now: never past the high-water mark (backpressure)."""
    return max(0, min(batch, high_water - list_length))


def dispatch_delay_s(claimed: int, room: int, poll_interval_s: float) -> float:
    """A full batch means more is probably due: claim again at once. Otherwise wait a poll."""
    if room > 0 and claimed >= room:
        return 0.0
    return poll_interval_s


def error_backoff_s(failures: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter after `failures` consecutive failed ticks (>= 1)."""
    if failures < 1:
        return 0.0
    ceiling = min(cap_s, base_s * 2 ** min(failures - 1, 30))
    return rng.uniform(ceiling / 2, ceiling)


def retry_delay_s(errors: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before a failed job's next run, after its `errors`-th failure (>= 1).

    Exponential (base, 2x base, 4x base... up to cap) with equal jitter: at least half the step,
    so retries stay spread out without ever collapsing to zero.
    """
    if errors < 1:
        raise ValueError("retry_delay_s is for a job that failed at least once")
    step = min(cap_s, base_s * 2 ** min(errors - 1, 40))
    return rng.uniform(step / 2, step)


def dead_after_failure(errors_before: int, max_attempts: int) -> bool:
    """A job that just failed is dead when this failure uses up its attempts."""
    return errors_before + 1 >= max_attempts


def dead_after_interruption(interruptions_before: int, max_interruptions: int) -> bool:
    """A job whose worker died is dead when this was its `max_interruptions`-th interruption."""
    return interruptions_before + 1 >= max_interruptions


def stepped_delay_s(retry: int, steps: Sequence[float]) -> float:
    """Delay before a topic message's `retry`-th retry (>= 1): that step, the last one repeating.

    Stepped, not exponential, and without jitter: RocketMQ's consumer retry levels (10 s, 30 s,
    1 min ... 2 h) are what users of topic consumers expect, and a group's retries are few.
    """
    if retry < 1:
        raise ValueError("stepped_delay_s is for a message that failed at least once")
    return float(steps[min(retry, len(steps)) - 1])


def dead_after_retries(errors_before: int, max_retries: int) -> bool:
    """A message that just failed is dead when it had already been retried max_retries times."""
    return errors_before >= max_retries


# How many suspects may share a start, by their interruptions (shared.policy.suspect_group_size).
SUSPECT_FANOUT = 32


def suspect_group_size(interruptions: int, max_interruptions: int) -> int:
    """How many suspects (work whose worker died while running it) with `interruptions` deaths
    behind them may run together in one start: SUSPECT_FANOUT ** (max_interruptions - 1 -
    interruptions), and 1 (alone) from max_interruptions - 1 on.

    Each death in a group shrinks the group its members run in next by SUSPECT_FANOUT, so a poison
    job reaches its run alone after max_interruptions - 1 deaths, whatever the batch size, and dies
    there for the max_interruptions-th time; healthy suspects meanwhile run in groups, not one per
    batch.
    """
    if interruptions < 1:
        raise ValueError("suspect_group_size is for work interrupted at least once")
    return int(SUSPECT_FANOUT ** min(4, max(0, max_interruptions - 1 - interruptions)))


def start_groups(interruptions: Sequence[int], max_interruptions: int) -> list[list[int]]:
    """A worker batch split into starts, as indices into `interruptions` (one per row): the clean
    rows (never interrupted) together first, then the suspects, fewest interruptions first, in
    groups of one count each of at most suspect_group_size. Each group is started and acked before
    the next starts, so a worker death interrupts one group only, and a group of one was alone.
    """
    clean = [i for i, n in enumerate(interruptions) if n < 1]
    groups = [clean] if clean else []
    by_count: dict[int, list[int]] = {}
    for i, n in enumerate(interruptions):
        if n >= 1:
            by_count.setdefault(n, []).append(i)
    for n in sorted(by_count):
        size = suspect_group_size(n, max_interruptions)
        members = by_count[n]
        groups += [members[k : k + size] for k in range(0, len(members), size)]
    return groups


def form_runs(interruptions: Sequence[int], run_size: int, max_interruptions: int) -> list[list[int]]:
    """Due jobs (their interruptions, in claim order) -> runs, as indices: the clean jobs in runs of
    up to run_size, then each group of suspects start_groups makes, a run of its own (the worker
    runs a run of suspects with nothing beside it)."""
    groups = start_groups(interruptions, max_interruptions)
    if not groups or interruptions[groups[0][0]] >= 1:
        return groups
    clean, suspects = groups[0], groups[1:]
    return [clean[k : k + run_size] for k in range(0, len(clean), run_size)] + suspects


LOOK_BEHIND_CHEAP_JOBS = 2_000  # jobs in runs whose count behind the cursors costs well under a ms
LOOK_BEHIND_EVERY_S = 0.5


def look_behind_every_s(jobs_in_runs: int) -> float:
    """How often a job queue's claim looks behind its cursors for a job whose insert committed after
    a later one was claimed. The look counts the due jobs behind the cursors (the runs' members,
    mostly), so it costs as much as the jobs in flight: every claim while they are few (a late job
    then waits for no interval), at most every LOOK_BEHIND_EVERY_S once they are many."""
    return 0.0 if jobs_in_runs <= LOOK_BEHIND_CHEAP_JOBS else LOOK_BEHIND_EVERY_S


def look_behind_paused_every_s(every_s: float, took_s: float) -> float:
    """look_behind_every_s while a task is paused: its pending jobs sit behind the cursors and each
    look reads past them (50,000 of them: ~30 ms more), so at most every LOOK_BEHIND_EVERY_S and
    never more than a tenth of the claims' time."""
    return max(every_s, LOOK_BEHIND_EVERY_S, 10 * took_s)


def blame_interruptions(
    running: Sequence[tuple[int, int, object]], max_interruptions: int
) -> tuple[list[int], list[int]]:
    """Interrupted runs (their lease ran out: the worker died) -> (again, dead) ids.

    `running`: (id, interruptions so far, start) of rows whose lease ran out; `start` identifies the
    start they ran in (its worker and start time). Every interruption is counted: it sets the size
    of the group the row runs in next (suspect_group_size). Only a row that ran alone can be to
    blame, so only such a row is dead, at its max_interruptions-th interruption: a worker killed
    from outside never dead-letters the healthy rows of a group.
    """
    sizes = Counter(start for _, _, start in running)
    dead = [
        i for i, n, start in running if sizes[start] == 1 and dead_after_interruption(n, max_interruptions)
    ]
    gone = set(dead)
    return [i for i, _, _ in running if i not in gone], dead


# -- redelivery: which requeue causes run on a tick, and what their counts mean -----------------

# Why dispatched work goes back to pending, in the order a redelivery tick runs them
# (dispatcher/redelivery.py). "lost": Redis lost its entries (the epoch canary was gone), so every
# row no worker holds, now; "expired": dispatched and not acked within the visibility timeout;
# "interrupted": a started job's, delivery's, row's or span's lease ran out (paced by
# interrupted_every_s); "held": popped by a worker silent for worker.dead_after_s, never started.
# (Rows whose push Redis refused go back at once, on no tick.)
Cause = Literal["lost", "expired", "interrupted", "held"]
CAUSES: tuple[Cause, ...] = ("lost", "expired", "interrupted", "held")
# Singleton causes run only in the leader; any dispatcher may find the canary gone.
LEADER_CAUSES: frozenset[Cause] = frozenset({"expired", "interrupted", "held"})
# Causes that take at most a batch per store and call: a full one means more may be waiting.
BATCHED_CAUSES: frozenset[Cause] = frozenset({"lost", "expired", "interrupted"})


# A lease that ran out is looked for at least this many times per shortest lease, so a dead or
# stopped worker's work is back within its lease and a tenth (15 s + 1.5 s by default).
INTERRUPTED_CHECKS_PER_LEASE = 10


def interrupted_every_s(sweep_interval_s: float, leases_s: Collection[float]) -> float:
    """How often the "interrupted" cause runs: every sweep, and at least INTERRUPTED_CHECKS_PER_LEASE
    times per the shortest of `leases_s` (every lease a store of the process keeps)."""
    if not leases_s:
        return sweep_interval_s
    return min(sweep_interval_s, min(leases_s) / INTERRUPTED_CHECKS_PER_LEASE)


def redelivery_due(
    now_s: float,
    last_s: Mapping[Cause, float],
    every_s: Mapping[Cause, float],
    backlog: Set[Cause],
    *,
    leader: bool,
) -> tuple[Cause, ...]:
    """The causes to run now, in CAUSES order: each this process runs (a key of `every_s`) and may
    run (the leader's only while leading) whose last run (`last_s`, absent: never) is an interval
    old, or left a backlog."""
    return tuple(
        c
        for c in CAUSES
        if c in every_s
        and (leader or c not in LEADER_CAUSES)
        and (c in backlog or c not in last_s or now_s - last_s[c] >= every_s[c])
    )


def redelivery_delay_s(
    now_s: float,
    last_s: Mapping[Cause, float],
    every_s: Mapping[Cause, float],
    backlog: Set[Cause],
    *,
    leader: bool,
) -> float:
    """How long until the next tick: none while a cause it may run has a backlog; else until the
    first cause falls due. A cause it may not run now (not leading) is looked at again after its
    interval, so a standby neither spins nor waits long to take over."""
    if not every_s:
        raise ValueError("redelivery_delay_s needs at least one cause to pace")

    def wait_s(c: Cause) -> float:
        if not leader and c in LEADER_CAUSES:
            return every_s[c]
        if c in backlog or c not in last_s:
            return 0.0
        return max(0.0, last_s[c] + every_s[c] - now_s)

    return min(wait_s(c) for c in every_s)


def redelivery_backlog(cause: Cause, counts: Sequence[int], batch: int) -> bool:
    """Whether `cause` has more waiting: one of its calls (one per store) filled its batch. A dead
    worker's hold is requeued whole, so "held" never has a backlog."""
    return cause in BATCHED_CAUSES and any(n >= batch for n in counts)


# -- range mode: when a span whose last rows straggle is finished without them -------------------

SPAN_SETTLE_AFTER_S = 0.5  # a span is given this long before its stragglers are left behind
SPAN_STRAGGLER_SHARE = 0.05  # ...and then at most this share of its rows (at least one) may be out


def span_settled(total: int, outstanding: int, elapsed_s: float) -> bool:
    """Whether a started span of `total` rows, `outstanding` of them still without an outcome
    `elapsed_s` after its start, is finished now: when every row has an outcome, or when it has run
    SPAN_SETTLE_AFTER_S and only stragglers are out (at most SPAN_STRAGGLER_SHARE of its rows, at
    least one). A straggler's outcome then lands on its own, as long as its span was not claimed
    again (shared/storage/range_store.py): one slow check does not hold up its span's thousand."""
    if outstanding <= 0:
        return True
    allowed = max(1, int(total * SPAN_STRAGGLER_SHARE))
    return elapsed_s >= SPAN_SETTLE_AFTER_S and outstanding <= allowed


# -- leases: when a lease keeper renews, and when its process must stop ----------------------------

FENCE_SHARE = 0.8  # as the leader lease (dispatcher/leader.py): act on at most this share of a lease


@dataclass(frozen=True)
class LeaseTiming:
    renew_s: float  # renew this long after the last confirmation
    retry_s: float  # after a renewal that failed or could not confirm every lease, try again this soon
    fence_s: float  # no confirmation for this long: the process stops (see fence_reason)


def lease_timing(lease_s: float) -> LeaseTiming:
    """Renew every third of the lease; stop the process at 0.8 of it without a confirmation.

    Confirmations are timed from before the statement that set the leases (the database's NOW(6)
    came later), so at the fence a fifth of the lease is still left for the process to end before
    any sweeper can see the lease run out.
    """
    return LeaseTiming(lease_s / 3, lease_s / 30, lease_s * FENCE_SHARE)


def start_in_time(elapsed_s: float, timing: LeaseTiming) -> bool:
    """Whether started work may run, `elapsed_s` after the start's statement was sent (its commit
    may have stalled: a read lock, a full disk): only while its first renewal is not yet due, so
    two thirds of the lease are left and a renewal has time to be confirmed before the fence. Later,
    the lease may run out (or has) before the keeper could confirm it: the work is given back unrun."""
    return elapsed_s < timing.renew_s


def keeper_fits(lease_s: float, keeper_timeout_s: float) -> bool:
    """Whether one renewal, started on time and stalled once connecting and once reading (each cut
    off after keeper_timeout_s), is over before the fence: one stall must not stop a healthy worker."""
    timing = lease_timing(lease_s)
    return timing.renew_s + 2 * keeper_timeout_s < timing.fence_s


def shortest_lease_s(keeper_timeout_s: float) -> float:
    """The lease keeper_fits needs more than, for a keeper timeout (for error messages)."""
    return 2 * keeper_timeout_s / (FENCE_SHARE - 1 / 3)


Renewal = Literal["confirmed", "lost", "unknown"]


def renewal_outcome(needed: Collection[int], kept: Collection[int], gone: Collection[int]) -> Renewal:
    """What one renewal proved about the ids a batch still needs leased (those not being acked).

    "lost": one is no longer running under its attempt, so another worker may run it now;
    "confirmed": every one was extended; "unknown": some were locked by another session (neither).
    """
    if any(i in gone for i in needed):
        return "lost"
    return "confirmed" if all(i in kept for i in needed) else "unknown"


Fence = Literal["lost", "unconfirmed", "hung"]


def fence_reason(
    now: float,
    *,
    confirmed: float,
    started: float,
    lost: bool,
    timing: LeaseTiming,
    timeout_s: float | None,
) -> Fence | None:
    """Why a process holding a batch must stop now (times on one monotonic clock), or None.

    "lost": a lease is gone; "unconfirmed": the leases were last confirmed fence_s ago and may run
    out before another renewal lands; "hung": the batch has run longer than its timeout.
    """
    if lost:
        return "lost"
    if now >= confirmed + timing.fence_s:
        return "unconfirmed"
    if timeout_s is not None and now >= started + timeout_s:
        return "hung"
    return None


# -- the worker's acks and in-flight bound (worker/worker.py) -----------------------------------------

ACK_BATCH = 500  # outcomes that make an ack worth its transaction at once
ACK_WAIT_S = 0.05  # ...else the oldest waits at most this long: checks are acked as they finish


def ack_now(pending: int, oldest_age_s: float, left: int) -> bool:
    """Whether a flight's finished outcomes are acked now: its last rows are in, enough wait to fill
    a statement, or the oldest has waited ACK_WAIT_S. Small fenced batches, never the whole flight."""
    if pending == 0:
        return False
    return left == 0 or pending >= ACK_BATCH or oldest_age_s >= ACK_WAIT_S


def in_flight_cap(setting: int | None, pop_batch: int, any_async: bool) -> int:
    """Rows a worker keeps started and unacked. Set: that. Unset: room for many awaiting checks
    (async handlers wait, they do not compute), else one batch, refilled as its rows finish (a killed
    worker's started rows, back only when their leases run out, stay at most a batch)."""
    if setting is not None:
        return setting
    return max(10_000, 2 * pop_batch) if any_async else pop_batch


def pop_room(cap: int, in_flight: int, pop_batch: int) -> int:
    """Rows to pop now: none until a quarter of a batch fits (tiny pops cost a round trip each)."""
    room = min(cap - in_flight, pop_batch)
    return room if room >= max(1, min(pop_batch, cap) // 4) else 0


def too_many_stuck(stuck: int, threads: int) -> bool:
    """A worker whose threads are more than half stuck in calls past their limit leaves (and is
    replaced by its supervisor): Python cannot stop a thread, only a process."""
    return stuck > 0 and 2 * stuck > threads


def handler_in_time(now: float, confirmed: float, lost: bool, timing: LeaseTiming) -> bool:
    """Whether a handler of leased work may start now (times on one monotonic clock), asked right
    before each call, not only when its batch started: not once a lease was found lost, nor once the
    leases were last confirmed fence_s ago (a process stopped, or starved, past that point): they may
    have run out, and another worker may be running that work. The call is skipped; its row comes
    back by its lease, and the watchdog is about to end the process."""
    return not lost and now < confirmed + timing.fence_s


def idle_transaction_limit_s(setting: int | None, leases_s: Collection[float]) -> int:
    """How long a worker's session may sit idle inside a transaction before the server ends it
    (worker.idle_transaction_s): as set (0: off), or else the longest lease it serves, rounded up,
    so a stopped worker's open ack holds its rows about a lease at most, and a live worker's
    renewals are never outlived by its own idle transaction."""
    if setting is not None:
        return setting
    return math.ceil(max(leases_s, default=0.0))
