"""The README's Guarantees section claims no more than the fault tier proves about one run per attempt.

The known limit (a copy re-running an attempt when its holder was SIGKILLed) is closed: every start
is committed before a handler runs. The README must say one attempt runs at most once for every kind
of work, link the fault test that checks it, and no strict xfail may be left open for it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.faults import known_bugs

ROOT = Path(__file__).resolve().parents[3]
TEST_FILE = "tests/faults/crashes/test_duplicate_entries.py"


def guarantees() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## Guarantees\n(.*?)^## ", text, flags=re.S | re.M)
    assert match, "README.md has no Guarantees section"
    return " ".join(match.group(1).split())


def test_one_run_per_attempt_is_stated_for_every_kind_with_its_test() -> None:
    assert not hasattr(known_bugs, "COPY_RERUNS_AFTER_HOLDER_KILLED"), "the limit is open again: say so"
    section = guarantees()
    assert f"({TEST_FILE})" in section, "the Guarantees section links the fault test"
    assert "KNOWN LIMIT" not in section
    assert "xfail" not in (ROOT / TEST_FILE).read_text()
    for words in (
        "runs at most once",
        "commits before any handler runs",
        "row mode and in range mode",
        "one-off jobs, cluster consumer groups",
        "SIGKILLed after running it",
    ):
        assert words in section, f"the Guarantees section no longer says {words!r}"


def test_no_promise_of_exactly_once() -> None:
    section = guarantees()
    assert "At-least-once" in section
    assert "exactly once" not in section.lower()
