"""A limited task's claim asks whether the few jobs it read are held by a live run, against the runs'
member ranges (not expanded: the queue's other runs may hold tens of thousands of jobs)."""

from __future__ import annotations

from duecast.shared.storage.leased.members import decode_members, encode_members, member_ranges
from duecast.shared.storage.leased.task_claims import held_by


def test_member_ranges_are_the_codecs_items() -> None:
    ids = [3, 4, 5, 9, 12, 13]
    text = encode_members(ids)
    assert member_ranges(text) == [(3, 5), (9, 9), (12, 13)]
    assert member_ranges(text.encode()) == member_ranges(text)
    assert [i for lo, hi in member_ranges(text) for i in range(lo, hi + 1)] == decode_members(text)
    assert member_ranges("") == []


def test_a_job_is_held_only_inside_a_range() -> None:
    held = sorted(member_ranges("10-20,25") + member_ranges("30-31"))
    inside = {j for j in range(0, 40) if held_by(held, j)}
    assert inside == {*range(10, 21), 25, 30, 31}
    assert not held_by([], 10)
