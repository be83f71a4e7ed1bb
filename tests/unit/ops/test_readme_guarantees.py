"""The README's Guarantees section claims no more than the fault tier proves about one run per attempt.

While tests/faults keeps the strict xfail KNOWN LIMIT of a copy re-running an attempt, the README
must state the exception and link the test; fixing the limit turns the xfail into a failure there,
and this test then asks for the README to be updated in the same change.
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


def test_the_known_limit_is_stated_with_its_modes_case_and_test() -> None:
    limit_open = hasattr(known_bugs, "COPY_RERUNS_AFTER_HOLDER_KILLED")
    assert limit_open, "the limit is closed: say so in README.md's Guarantees and drop this test's check"
    section = guarantees()
    assert f"({TEST_FILE})" in section, "the Guarantees section links the fault test"
    assert (ROOT / TEST_FILE).read_text().count("COPY_RERUNS_AFTER_HOLDER_KILLED") >= 2
    for words in (
        "row mode and in range mode",
        "already waiting",
        "SIGKILLed *after* running the handler",
        "KNOWN LIMIT",
        "One-off jobs and cluster consumer groups",
    ):
        assert words in section, f"the Guarantees section no longer says {words!r}"


def test_no_unqualified_promise_of_one_run_per_attempt() -> None:
    section = guarantees()
    for sentence in re.split(r"(?<=[.:])\s", section):
        if "at most once" in sentence:
            assert "exception" in sentence, f"an unqualified promise: {sentence!r}"
