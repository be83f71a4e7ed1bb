"""The fault tier's oracle, checked on a hand-written log (no servers): every verdict it can give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.checker import Execution, classify, read_log

pytestmark = pytest.mark.faults


def test_classify_reports_lost_duplicate_redundant_unexpected_and_wrong_outcome(tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    log.write_text(
        "s 1 1 10\n"  # 1: once
        "s 2 1 10\ns 2 1 11\n"  # 2: the same attempt twice
        "s 3 1 10\ns 3 2 11\n"  # 3: two attempts (redundant), outcome recorded from attempt 1
        "s 5 1 10\n"  # 5: still pending at the end
        "s 9 1 10\n"  # 9: never created
        "other 4 1 10\n"  # another source's execution of id 4 does not count
    )
    runs = read_log(log)
    assert runs[0] == Execution("s", 1, 1, 10)

    verdict = classify(runs, "s", expected=[1, 2, 3, 4, 5], pending=[5], outcomes={1: 1, 3: 1})
    assert verdict.lost == {4, 5}
    assert verdict.duplicates == {(2, 1): 2}
    assert verdict.redundant == {3: (1, 2)}
    assert verdict.unexpected == {9}
    assert verdict.wrong_outcome == {3: (1, 2)}
    assert verdict.attempts(3) == [1, 2]
    assert verdict.ids_by(11) == {2, 3}


def test_a_missing_log_means_nothing_ran(tmp_path: Path) -> None:
    verdict = classify(read_log(tmp_path / "absent.log"), "s", expected=[1])
    assert verdict.lost == {1}
    assert not verdict.executions
