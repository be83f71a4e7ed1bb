"""The chaos checker, pure: what counts as lost, double-acked, explained or unexpected."""

from __future__ import annotations

from tests.chaos.checker import Fault, classify


def test_a_clean_run_has_nothing_to_report() -> None:
    v = classify({1, 2}, set(), {1: [10], 2: [11]}, {1: 1, 2: 1}, [])
    assert v.ok
    assert (v.lost, v.double_ack, v.redundant, v.unexpected) == ([], [], {}, [])


def test_missing_and_double_acks_are_lost_and_double_acked() -> None:
    v = classify({1, 2, 3}, set(), {1: [10], 2: [10]}, {1: 2, 2: 1}, [])
    assert (v.lost, v.double_ack, v.ok) == ([3], [1], False)


def test_a_rerun_is_explained_only_by_a_fault_on_the_process_that_ran_it() -> None:
    faults = [Fault(0.0, "sigkill", 10)]
    explained = classify({1}, set(), {1: [10, 11]}, {1: 1}, faults)
    assert (explained.redundant, explained.unexpected) == ({1: "sigkill"}, [])
    unexplained = classify({1}, set(), {1: [12, 11]}, {1: 1}, faults)
    assert unexplained.redundant == {}
    assert unexplained.unexpected == ["job 1 ran 2 times (pids [12, 11]); faults do not explain it"]


def test_a_database_restart_explains_reruns_anywhere() -> None:
    v = classify({1}, set(), {1: [12, 12]}, {1: 1}, [Fault(0.0, "mariadb_restart", None)])
    assert v.redundant == {1: "mariadb_restart"}
    assert v.ok


def test_runs_and_acks_of_jobs_never_enqueued_are_unexpected_and_poison_is_not_judged() -> None:
    v = classify({1}, {9}, {1: [10], 7: [10], 9: [10, 11, 12]}, {1: 1, 9: 1}, [])
    assert v.unexpected == ["job 7 ran but was never enqueued", "job 9 acked but never enqueued as healthy"]
