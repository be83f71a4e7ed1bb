"""shared.inflight's fair share of a worker's cap (issue 27.8): each source keeps room the others may
not fill (its share while active, one small pop while idle), alone it is pop_room, and a pop of
entries standing for many rows never takes the others' room."""

from __future__ import annotations

import pytest

from duecast.shared.inflight import entries_to_pop, fair_rooms
from duecast.shared.policy import pop_room

ALONE = [(2000, 0, 2000), (10_000, 9_000, 2000), (40, 35, 100)]


@pytest.mark.parametrize(("cap", "in_flight", "batch"), ALONE)
@pytest.mark.parametrize("active", [[], ["s"]])
def test_alone_it_is_pop_room(cap: int, in_flight: int, batch: int, active: list[str]) -> None:
    expected = {"s": pop_room(cap, in_flight, batch)}
    assert fair_rooms(cap, {"s": in_flight}, ["s"], batch, active) == expected


def test_a_backlog_never_fills_the_share_of_an_active_source() -> None:
    # Plain handlers' default cap (one batch): the jobs hold what the re-scan leaves of its share.
    rooms = fair_rooms(2000, {"jobs": 1000, "users": 0}, ["jobs", "users"], 2000, ["jobs", "users"])
    assert rooms == {"jobs": 0, "users": 1000}
    rooms = fair_rooms(2000, {"jobs": 1000, "users": 300}, ["jobs", "users"], 2000, ["jobs", "users"])
    assert rooms == {"jobs": 0, "users": 700}


def test_an_idle_source_keeps_room_for_one_pop_only() -> None:
    rooms = fair_rooms(2000, {"jobs": 0}, ["jobs", "users"], 2000, ["jobs"])
    assert rooms == {"jobs": 1750, "users": 1000}  # the users keep 250: a quarter of their share
    rooms = fair_rooms(2000, {"jobs": 1750}, ["jobs", "users"], 2000, ["jobs"])
    assert rooms == {"jobs": 0, "users": 250}  # ...which they can always pop


def test_room_freed_by_one_source_goes_to_any() -> None:
    # An async app's default cap: each active source's share is a batch; the rest is anyone's.
    rooms = fair_rooms(10_000, {"jobs": 2000, "users": 2000}, ["jobs", "users"], 2000, ["jobs", "users"])
    assert rooms == {"jobs": 2000, "users": 2000}
    rooms = fair_rooms(10_000, {"jobs": 8000, "users": 0}, ["jobs", "users"], 2000, ["jobs", "users"])
    assert rooms == {"jobs": 0, "users": 2000}


def test_sources_never_keep_more_than_the_cap_between_them() -> None:
    sources = [f"s{i}" for i in range(8)]
    rooms = fair_rooms(100, {}, sources, 2000, sources)
    assert rooms == {s: 100 - 7 * 12 for s in sources}  # shares of 12, each keeps its own


def test_entries_alone_cover_the_room_as_ever() -> None:
    assert entries_to_pop(1500, 1000, 500, shared=False) == 2
    assert entries_to_pop(1, 500, 0, shared=False) == 1
    assert entries_to_pop(0, 1, 0, shared=False) == 0


def test_entries_beside_others_fit_their_room() -> None:
    assert entries_to_pop(1500, 1000, 500, shared=True) == 1
    assert entries_to_pop(400, 500, 100, shared=True) == 0  # a run of 500 jobs would take others' room
    assert entries_to_pop(400, 500, 0, shared=True) == 1  # ...unless nothing of it is in flight
    assert entries_to_pop(700, 1, 0, shared=True) == 700
    assert entries_to_pop(0, 500, 0, shared=True) == 0


def test_a_cap_smaller_than_the_sources_kept_rooms_still_lets_one_pop() -> None:
    # A cap of 1 over two queues (pop_batch 1): each would keep 1 for itself and lock both out.
    assert fair_rooms(1, {}, ["critical", "default"], 1, []) == {"critical": 1, "default": 1}
    # One running: the cap is full, nobody pops (a pop takes one list, so the cap holds).
    assert fair_rooms(1, {"critical": 1}, ["critical", "default"], 1, ["critical"]) == {
        "critical": 0,
        "default": 0,
    }
