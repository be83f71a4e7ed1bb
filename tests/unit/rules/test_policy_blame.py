"""shared.blame_policy: a fleet-wide interruption (several workers' leases in one pass, or a worker
that fenced itself) counts nothing and kills nothing; one worker's lone run is blamed as before."""

from __future__ import annotations

import itertools

import pytest

from duecast.shared.blame_policy import FLEET_WIDE_WORKERS, Verdict, fleet_wide, judge_interruptions
from duecast.shared.policy import blame_interruptions, start_groups


def test_two_workers_losing_their_leases_in_one_pass_is_fleet_wide_and_one_is_not() -> None:
    assert FLEET_WIDE_WORKERS == 2
    assert not fleet_wide([])
    assert not fleet_wide(["w1", "w1", "w1"])
    assert fleet_wide(["w1", "w2"])
    assert fleet_wide(["w1", "w2", "w1", "w3"])


def test_a_fleet_wide_pass_excuses_everything_even_lone_runs_at_their_last_interruption() -> None:
    running = [(1, 2, ("r1", "w1"), "w1"), (2, 2, ("r2", "w2"), "w2"), (3, 0, ("r3", "w2"), "w2")]
    assert judge_interruptions(running, 3) == Verdict(excused=[1, 2, 3])


def test_a_fenced_worker_is_excused_even_alone_at_its_last_interruption() -> None:
    running = [(7, 2, ("r1", "w1"), "w1")]
    assert judge_interruptions(running, 3, fenced=True) == Verdict(excused=[7])
    assert judge_interruptions(running, 3) == Verdict(dead=[7])


def test_one_workers_pass_is_blamed_exactly_as_blame_interruptions_blames_it() -> None:
    running = [
        (1, 0, "s-a", "w"),
        (2, 5, "s-a", "w"),
        (3, 1, "s-b", "w"),
        (4, 2, "s-c", "w"),
        (5, 7, "s-d", "w"),
    ]
    verdict = judge_interruptions(running, 3)
    assert verdict == Verdict(again=[1, 2, 3], dead=[4, 5])
    assert (verdict.again, verdict.dead) == blame_interruptions([r[:3] for r in running], 3)
    assert judge_interruptions([], 3) == Verdict()


@pytest.mark.parametrize("cap", [1, 2, 3, 5])
@pytest.mark.parametrize("fenced", [False, True])
def test_every_id_lands_in_exactly_one_list_over_small_cases(cap: int, fenced: bool) -> None:
    for counts in itertools.product(range(cap + 1), repeat=3):
        for workers in itertools.product("ab", repeat=3):
            running = [(i, n, (i % 2, w), w) for i, (n, w) in enumerate(zip(counts, workers, strict=True))]
            v = judge_interruptions(running, cap, fenced=fenced)
            assert sorted(v.again + v.excused + v.dead) == [0, 1, 2]
            if fenced or len(set(workers)) > 1:
                assert v.excused == [0, 1, 2]  # nothing counted, nothing dead


def test_a_poison_job_killing_its_worker_alone_each_time_dies_at_exactly_the_cap() -> None:
    """The worker protocol: a poison job among 40 healthy ones kills its (one) worker whenever it
    runs; only its own worker's leases run out each time, so it is blamed and dies at the cap, and
    no healthy job dies."""
    cap, poison = 3, 17
    counts, dead = dict.fromkeys(range(40), 0), set()
    pending = set(counts)
    deaths = 0
    while pending:
        rows = sorted(pending)
        for group in start_groups([counts[r] for r in rows], cap):
            ids = [rows[g] for g in group]
            if poison not in ids:
                pending -= set(ids)  # done
                continue
            deaths += 1
            v = judge_interruptions([(i, counts[i], "start", "w1") for i in ids], cap)
            for i in v.again + v.dead:
                counts[i] += 1
            dead |= set(v.dead)
            pending -= set(v.dead)
            break  # the worker died: the rest of its batch comes back with the next pop
    assert dead == {poison}
    assert counts[poison] == cap == deaths


def test_fleet_wide_events_in_a_row_never_shrink_a_healthy_group_or_kill_it() -> None:
    """Any number of fleet-wide passes leave a healthy job's count where it was, so one later
    unrelated kill of its group does not find it alone at its last interruption."""
    running = [(i, 1, ("run", f"w{i % 3}"), f"w{i % 3}") for i in range(10)]
    for _ in range(5):
        assert judge_interruptions(running, 3) == Verdict(excused=list(range(10)))
