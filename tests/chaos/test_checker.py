"""The chaos checkers' verdicts on hand-written runs (no servers): every class they can give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.checker import Fault, Holding, classify, read_executions, work_recovery
from tests.chaos.rescan_checker import Check, RescanSource, classify_rescan, read_rescan_log

pytestmark = pytest.mark.faults

ROWS = RescanSource("rows", range(1, 6))  # row mode: an ack covers its row
SPANS = RescanSource("spans", range(1, 20), unit_size=10)  # range mode: units 0 (1-9) and 1 (10-19)
KILLED, STOPPED, HEALTHY = 10, 11, 12
FAULTS = [
    Fault(100.0, "sigkill", KILLED),
    Fault(101.0, "sigstop", STOPPED),
    Fault(102.0, "redis_flush", None),
]
END = 150.0  # when the faults were over


def check(
    source: str,
    unit: int,
    attempt: int,
    at: float,
    pid: int | None = HEALTHY,
    *,
    started: bool = True,
    saw: int | None = None,
) -> Check:
    """An ack's record; a row-mode one (with a pid) carries the attempt its handler saw (`saw`,
    by default the fence's)."""
    return Check(source, unit, attempt, started, (saw or attempt) if pid is not None else saw, pid, at)


def healthy_rows(at: float = 160.0) -> tuple[dict[tuple[str, int, int], list[int]], list[Check]]:
    """Rows 1-5 each run once under attempt 9 and acked, after the faults."""
    runs = {("rows", i, 9): [HEALTHY] for i in ROWS.ids}
    return runs, [check("rows", i, 9, at) for i in ROWS.ids]


def test_a_clean_run_has_nothing_to_report() -> None:
    runs, checks = healthy_rows()
    verdict = classify_rescan([ROWS], runs, checks, FAULTS, END)
    assert verdict.ok
    assert (verdict.checks["rows"], verdict.runs, verdict.redundant) == (5, 5, {})


def test_runs_whose_work_was_repeated_need_a_fault_on_their_process() -> None:
    runs, checks = healthy_rows()
    runs[("rows", 1, 8)] = [KILLED]  # killed before its ack: run again under attempt 9
    runs[("rows", 2, 9)] = [STOPPED, HEALTHY]  # a copy of one attempt; the healthy run acked
    runs[("rows", 3, 8)] = [HEALTHY]  # never acked, and nothing hit its process
    runs[("rows", 4, 9)] = [HEALTHY, HEALTHY]  # one attempt twice with no fault
    verdict = classify_rescan([ROWS], runs, checks, FAULTS, END)
    assert verdict.redundant == {("rows", 1, 8): "sigkill", ("rows", 2, 9): "sigstop"}
    assert verdict.repeated == 1
    assert sorted(verdict.unexpected) == [
        "rows row 3 attempt 8: runs by [12], never acked, unexplained",
        "rows row 4 attempt 9: runs by [12, 12], acked, unexplained",
    ]


def test_a_known_acker_is_not_blamed_for_the_copy_that_did_not_ack() -> None:
    """Row mode records who acked: if the killed process acked, the healthy copy is unexplained."""
    runs, checks = healthy_rows()
    runs[("rows", 1, 9)] = [HEALTHY, KILLED]
    checks[0] = check("rows", 1, 9, 160.0, pid=KILLED)
    verdict = classify_rescan([ROWS], runs, checks, FAULTS, END)
    assert verdict.unexpected == ["rows row 1 attempt 9: runs by [12, 10], acked, unexplained"]


def test_a_server_wide_fault_explains_a_run_by_anyone() -> None:
    runs, checks = healthy_rows()
    runs[("rows", 1, 8)] = [HEALTHY]
    verdict = classify_rescan([ROWS], runs, checks, [*FAULTS, Fault(103.0, "mariadb_restart", None)], END)
    assert verdict.redundant == {("rows", 1, 8): "mariadb_restart"}
    assert verdict.ok


def test_two_acks_for_one_attempt_are_a_double_ack() -> None:
    runs, checks = healthy_rows()
    checks.append(check("rows", 5, 9, 161.0))
    verdict = classify_rescan([ROWS], runs, checks, FAULTS, END)
    assert verdict.double_ack == [("rows", 5, 9)]
    assert not verdict.ok


def test_acks_no_fenced_ack_could_have_made_are_unexpected() -> None:
    runs, checks = healthy_rows()
    checks += [
        check("rows", 1, 9, 161.0, started=False),  # also a second ack: double
        check("rows", 2, 7, 161.0),  # an attempt that never ran
        check("rows", 3, 9, 161.0, saw=8),  # the handler saw another attempt
        check("rows", 4, 9, 161.0, pid=STOPPED),  # by a process that never ran it
        check("rows", 99, 1, 161.0),  # no such row
    ]
    verdict = classify_rescan([ROWS], runs, checks, FAULTS, END)
    assert verdict.unexpected == [
        "rows unit 1 attempt 9: acked while not started",
        "rows unit 2 attempt 7: acked, but rows [2] never ran under that attempt",
        "rows unit 3 attempt 9: the ack carried the handler's attempt 8",
        "rows unit 4 attempt 9: acked by pid 11, which never ran it",
        "rows unit 99 attempt 1: acked, but no such row",
    ]


def test_a_run_of_a_row_not_in_the_table_is_unexpected() -> None:
    runs, checks = healthy_rows()
    runs[("rows", 6, 1)] = [HEALTHY]
    runs[("other", 1, 1)] = [HEALTHY]
    verdict = classify_rescan([ROWS], runs, checks, FAULTS, END)
    assert verdict.unexpected == [
        "rows row 6 ran (attempt 1) but is not in the table",
        "other row 1 ran (attempt 1) but is not in the table",
    ]


def test_rows_not_checked_again_after_the_faults_ended_are_lost() -> None:
    runs, checks = healthy_rows()
    checks[1] = check("rows", 2, 9, END - 1)  # its last check came before the end
    del checks[2]  # never checked at all
    del runs[("rows", 3, 9)]
    verdict = classify_rescan([ROWS], runs, checks, FAULTS, END)
    assert verdict.lost == [("rows", 2), ("rows", 3)]
    assert not verdict.ok


def test_range_mode_acks_cover_a_span_and_need_every_row_of_it_run() -> None:
    runs = {("spans", i, 4): [HEALTHY] for i in SPANS.ids}
    runs |= {("spans", i, 3): [KILLED] for i in range(10, 15)}  # killed half-way through span 1
    checks = [check("spans", 0, 4, 160.0, pid=None), check("spans", 1, 4, 160.0, pid=None)]
    verdict = classify_rescan([SPANS], runs, checks, FAULTS, END)
    assert verdict.ok
    assert set(verdict.redundant) == {("spans", i, 3) for i in range(10, 15)}

    del runs[("spans", 12, 4)]  # span 1 acked under attempt 4 without running row 12
    verdict = classify_rescan([SPANS], runs, checks, FAULTS, END)
    assert verdict.unexpected == ["spans unit 1 attempt 4: acked, but rows [12] never ran under that attempt"]

    verdict = classify_rescan([SPANS], runs, checks[:1], FAULTS, END)
    assert verdict.lost == [("spans", i) for i in range(10, 20)]


def test_recovery_is_the_time_until_every_unit_was_checked_after_the_fault() -> None:
    runs, checks = healthy_rows()
    checks += [check("rows", i, 8, 100.5 + i, pid=None) for i in ROWS.ids]  # 101.5 .. 105.5
    verdict = classify_rescan([ROWS], runs, checks, FAULTS[:2], END)
    assert verdict.recovery["rows"] == [(FAULTS[0], 5.5), (FAULTS[1], 4.5)]

    runs, checks = healthy_rows(at=149.0)  # nothing checked after 149
    verdict = classify_rescan([ROWS], runs, checks, [Fault(149.5, "sigkill", KILLED)], 100.0)
    assert verdict.recovery["rows"] == [(Fault(149.5, "sigkill", KILLED), None)]
    assert verdict.worst_recovery() == {"sigkill": None}


def test_read_rescan_log(tmp_path: Path) -> None:
    log = tmp_path / "rescan.log"
    assert read_rescan_log(log) == {}
    # The second record was torn by a SIGKILL mid-write, and the next one followed on its line.
    log.write_text("\nrows 1 2 10 .\n\nrows 1 2 11 .\n\nrows 4 1 1\nspans 3 1 10 .\n\nrows 5 1 12 .\n")
    assert read_rescan_log(log) == {("rows", 1, 2): [10, 11], ("spans", 3, 1): [10], ("rows", 5, 1): [12]}


def test_read_executions_skips_a_torn_record(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    log.write_text("\n12 3456 .\n\n13 34\n14 7890 .\n\n15 7890 .")  # 13 torn; 15 lost its newline
    assert read_executions(log) == {12: [3456], 14: [7890], 15: [7890]}


def test_jobs_runs_beyond_the_acked_one_need_a_fault_on_their_process() -> None:
    executions = {1: [HEALTHY], 2: [KILLED, HEALTHY], 3: [HEALTHY, HEALTHY], 7: [HEALTHY]}
    verdict = classify({1, 2, 3, 4}, set(), executions, {1: 1, 2: 1, 3: 2, 9: 1}, FAULTS)
    assert verdict.lost == [4]
    assert verdict.double_ack == [3]
    assert verdict.redundant == {2: "sigkill"}
    assert len(verdict.unexpected) == 3  # 3 ran twice unexplained; 7 ran and 9 acked, never enqueued


def test_held_work_recovers_when_the_last_unit_not_acked_before_the_fault_is_acked() -> None:
    kill, lock = FAULTS[0], Fault(120.0, "mariadb_read_lock", None)
    holdings = [
        Holding(kill, "jobs", frozenset({1, 2, 3}), kill.at),  # 1 was acked before the kill
        Holding(lock, "group", frozenset({7}), 124.0),  # measured from the lock's end
        Holding(kill, "jobs", frozenset({1}), kill.at),  # nothing left to wait for: not measured
    ]
    acked = {"jobs": {1: [99.0], 2: [103.5], 3: [100.5, 104.0]}, "group": {7: [125.5]}}
    work = work_recovery(holdings, acked)
    assert [seconds for _, seconds in work.results] == [3.5, 1.5]
    assert work.worst() == {("sigkill", "jobs"): 3.5, ("mariadb_read_lock", "group"): 1.5}


def test_held_work_never_acked_after_the_fault_has_no_recovery() -> None:
    holding = Holding(FAULTS[0], "jobs", frozenset({1, 2}), FAULTS[0].at)
    work = work_recovery([holding], {"jobs": {1: [101.0]}})  # 2 is lost
    assert work.worst() == {("sigkill", "jobs"): None}
    assert work.lines() == ["sigkill (jobs, 1): median -, worst never"]
