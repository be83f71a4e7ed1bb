"""Product bugs and known limits the fault tier exposes, as strict xfail marks: a fix turns them into
XPASS failures, so the mark is removed in the same change.
"""

from __future__ import annotations

# Open (issue 24): in the whole suite's order, a Redis SIGKILL and restart mid-run has twice left one
# row of 300 (a one-off source) waiting past the test's 20 s, for the visibility timeout (60 s); the
# test passes when run alone. Not strict: it passes in most runs, and XPASS must not turn CI red.
ROW_WAITS_AFTER_REDIS_RESTART = (
    "issue 24: after a Redis restart mid-run, one one-off row may wait for the visibility timeout"
)

# Closed before. (A sweep passing over a killed worker's row was a claim's lock on the first row
# past its due rows, taken now by the drain's settle passes: tests/integration/recovery/test_locked_rows.py.
# Before it, a copy of an entry re-running its attempt when the holder was SIGKILLed
# while the copy waited for its row lock, was closed by committing each start before any handler
# runs: tests/faults/crashes/test_duplicate_entries.py.)
