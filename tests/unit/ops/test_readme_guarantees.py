"""The README's Guarantees section claims no more than the fault tier proves about one run per attempt:
it links the fault test that pushes entries several times, for every kind of source, and no known
limit of that guarantee is left open in tests/faults/known_bugs.py.
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


def test_one_run_per_attempt_is_promised_with_the_test_that_proves_it() -> None:
    assert not hasattr(known_bugs, "COPY_RERUNS_AFTER_HOLDER_KILLED"), "a known limit is open again: say so"
    section = guarantees()
    assert f"({TEST_FILE})" in section, "the Guarantees section links the fault test"
    assert "runs at most once" in section
    assert "committed compare-and-set" in section  # why it holds, in a sentence
    test = (ROOT / TEST_FILE).read_text()
    assert "xfail" not in test, "the fault test proves it for every kind, with no exception"
