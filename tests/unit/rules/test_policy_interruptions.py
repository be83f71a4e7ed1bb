"""Policy for dead jobs, interruptions, suspect groups and poison jobs."""

from __future__ import annotations

import pytest

from duecast.shared.policy import (
    blame_interruptions,
    dead_after_failure,
    dead_after_interruption,
    start_groups,
    suspect_group_size,
)


@pytest.mark.parametrize(
    ("before", "limit", "dead"), [(0, 1, True), (0, 3, False), (1, 3, False), (2, 3, True), (5, 3, True)]
)
def test_a_job_is_dead_when_this_failure_or_interruption_uses_up_its_budget(
    before: int, limit: int, dead: bool
) -> None:
    assert dead_after_failure(before, limit) is dead
    assert dead_after_interruption(before, limit) is dead


def test_interruptions_count_but_only_a_job_that_ran_alone_is_dead() -> None:
    running = [(1, 0, "start-a"), (2, 5, "start-a"), (3, 1, "start-b"), (4, 2, "start-c"), (5, 7, "start-d")]
    again, dead = blame_interruptions(running, 3)
    assert again == [1, 2, 3]  # 1, 2: killed together, never dead however often; 3: its 2nd
    assert dead == [4, 5]  # alone, and this interruption is the third (or later)
    assert blame_interruptions([], 3) == ([], [])


@pytest.mark.parametrize(
    ("interruptions", "cap", "size"),
    [
        (1, 3, 32),
        (2, 3, 1),
        (5, 3, 1),
        (1, 1, 1),
        (1, 2, 1),
        (1, 4, 1024),
        (2, 4, 32),
        (3, 4, 1),
        (1, 99, 32**4),
    ],
)
def test_suspect_groups_shrink_by_the_fanout_to_one_at_the_last_interruption(
    interruptions: int, cap: int, size: int
) -> None:
    assert suspect_group_size(interruptions, cap) == size


def test_suspect_group_size_is_for_suspects_only() -> None:
    with pytest.raises(ValueError, match="interrupted at least once"):
        suspect_group_size(0, 3)


def test_start_groups_run_the_clean_rows_together_then_suspects_by_count_in_groups() -> None:
    counts = [0, 2, 1, 0, 1, 2, 0, *([1] * 40)]
    groups = start_groups(counts, 3)
    assert groups[0] == [0, 3, 6]
    ones = [i for i, n in enumerate(counts) if n == 1]
    assert groups[1:3] == [ones[:32], ones[32:]]
    assert groups[3:] == [[1], [5]]  # two interruptions: the last one alone
    assert sorted(i for g in groups for i in g) == list(range(len(counts)))  # each row once
    assert start_groups([], 3) == []
    assert start_groups([1, 1], 1) == [[0], [1]]


def _poison_run(n: int, poison: int, cap: int) -> tuple[int, list[int]]:
    """Run a batch of n rows, one of them poison (it kills whatever start holds it), under the
    protocol (start_groups, blame_interruptions) until every row is done or dead. Returns the
    poison's deaths and the interruptions each healthy row suffered."""
    counts = [0] * n
    done: set[int] = set()
    deaths = 0
    while poison not in done:
        todo = [i for i in range(n) if i not in done]
        for group in start_groups([counts[i] for i in todo], cap):
            rows = [todo[i] for i in group]
            if poison not in rows:
                done.update(rows)
                continue
            deaths += 1
            again, dead = blame_interruptions([(i, counts[i], "start") for i in rows], cap)
            for i in [*again, *dead]:
                counts[i] += 1
            done.update(dead)
            assert dead in ([], [poison])  # nothing healthy is ever dead
            break  # the worker died: the rest of its batch goes back as it was
    return deaths, [counts[i] for i in range(n) if i != poison]


@pytest.mark.parametrize("cap", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 2, 31, 32, 33, 50, 100, 2000])
def test_a_poison_job_is_dead_after_max_interruptions_deaths_and_few_healthy_ones_share_them(
    n: int, cap: int
) -> None:
    for poison in {0, n // 3, n - 1}:
        deaths, healthy = _poison_run(n, poison, cap)
        # Whatever the batch size: with max_interruptions 1 a poison killed with batch-mates
        # is not dead yet (it may be innocent); it is at its next death, alone.
        assert deaths == (2 if cap == 1 and n > 1 else cap)
        # The first death takes the whole batch with it; after that only the poison's group.
        assert sum(1 for c in healthy if c > 1) <= max(0, suspect_group_size(1, cap) - 1)
        assert max(healthy, default=0) <= max(1, cap - 1)
