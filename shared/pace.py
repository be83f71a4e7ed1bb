"""An even pace: where in its period each row or span of a re-scan source is due, and when the
dispatcher claims what fell due. Pure: no I/O; shared/queries/pace.py computes the same in SQL,
exactly."""

from __future__ import annotations

# Consecutive keys land golden-ratio steps apart in the period (a Weyl sequence): any run of n keys
# covers every tenth of the period with n/10 of them, give or take two, whatever n is. The fraction
# (sqrt(5) - 1) / 2 to 19 digits, as an integer over PHASE_SCALE: SQL computes the same, exactly, in
# DECIMAL (shared.queries.pace), so a key's phase reads the same on both sides.
PHASE_SCALE = 10**19
PHASE_STEP = 6180339887498948482


def spread_phase_us(key: int, period_us: int) -> int:
    """A row's or span's phase, in [0, period): its checks are due at times congruent to it."""
    return (abs(key) * PHASE_STEP % PHASE_SCALE) * period_us // PHASE_SCALE


def slot_us(now_us: int, key: int, period_us: int) -> int:
    """The latest time at or before now_us at the key's phase: what a check made at now_us counts
    from (due again a period later). Never later than the check, less than a period earlier, so a
    key's checks settle on its phase whatever the table's starting state, and a late check keeps
    the slot it was due at."""
    return now_us - (now_us - spread_phase_us(key, period_us)) % period_us


# A re-scan's rows fall due evenly over its period (shared/queries/pace.py), so a claim takes what
# fell due since the one before. Claims poll_interval_s after the previous one ended drift against
# the clock (0.2 s plus the claim's own time), and each second then held 3 or 4 of them: 1-s windows
# of 84,000 and 112,000 checks at 100,000/s asked, with the cores half idle. On a fixed grid every
# second holds the same number of claims, and the finer the grid, the less one claim weighs.
PACE_TICK_S = 0.1
# Where in its step a claim falls, as a share of the step. A claim's checks run some tens of
# milliseconds after it (the claim's commit, the pops, the workers' starts), so the last claim of a
# second must come early enough for them to land in that second: at the middle of the step, 50 ms
# before the edge, a loaded MariaDB (row mode, 200,000 users every 10 s) moved one claim in twenty
# seconds into the next second, and each such move is a whole claim (10% of the second). A claim
# 20 ms into its step leaves 80 ms; the dispatcher's wake-up is never early, only late.
PACE_LEAD = 0.2


def paced_delay_s(now_s: float, tick_s: float = PACE_TICK_S) -> float:
    """Seconds from `now_s` (the wall clock) to the next claim of a re-scan source that is caught up:
    PACE_LEAD into the next step of a grid `tick_s` apart, whole seconds on its edges, so the checks
    of a claim (done tens of milliseconds later) fall in the second it belongs to."""
    return tick_s - (now_s - tick_s * PACE_LEAD) % tick_s
