"""An even pace in SQL: the slot a re-scan check counts from, at its key's phase (shared.policy).

A check made at NOW(6) records the latest time at or before it at its key's phase; it is due again a
period after that slot, so each source's checks settle evenly over its period.
"""

from __future__ import annotations

from ..pace import PHASE_STEP

# Microseconds since year 0 by the server's clock (DATETIME arithmetic: no time zone); TO_SECONDS
# drops the fraction, MICROSECOND gives it back. About 6.4e16: far within a BIGINT.
NOW_US = "(TO_SECONDS(NOW(6)) * 1000000 + MICROSECOND(NOW(6)))"
_STEP = f"0.{PHASE_STEP:019d}"  # PHASE_STEP / PHASE_SCALE (10^19), as an exact DECIMAL literal


def phase_sql(key: str, period_us: int) -> str:
    """pace.spread_phase_us in SQL, exact (DECIMAL arithmetic); `key` is a quoted column."""
    p = int(period_us)
    return f"FLOOR(MOD(ABS({key}) * {_STEP}, 1) * {p})"


def slot_sql(key: str, period_us: int) -> str:
    """pace.slot_us at NOW(6) in SQL: `NOW(6) - INTERVAL ... MICROSECOND`."""
    p = int(period_us)
    if p <= 0:
        raise ValueError("an even pace needs a period > 0")
    return f"NOW(6) - INTERVAL MOD({NOW_US} - {phase_sql(key, p)}, {p}) MICROSECOND"
