"""shared.policy: when a worker acks, how much it pops, how many rows it keeps in flight, when it leaves."""

from __future__ import annotations

import pytest

from duecast.shared.policy import ACK_BATCH, ACK_WAIT_S, ack_now, in_flight_cap, pop_room, too_many_stuck


@pytest.mark.parametrize(
    ("pending", "age", "left", "expected"),
    [
        (0, 10.0, 0, False),  # nothing to ack
        (1, 0.0, 0, True),  # the flight's last outcome is in
        (1, 0.0, 5, False),  # a lone early outcome waits a little for company
        (1, ACK_WAIT_S, 5, True),  # ...but never longer than ACK_WAIT_S
        (ACK_BATCH, 0.0, 5, True),  # a full statement goes at once
        (ACK_BATCH - 1, ACK_WAIT_S / 2, 5, False),
    ],
)
def test_ack_now(pending: int, age: float, left: int, expected: bool) -> None:
    assert ack_now(pending, age, left) is expected


def test_in_flight_cap() -> None:
    assert in_flight_cap(123, 2000, any_async=True) == 123  # a setting wins
    assert in_flight_cap(None, 2000, any_async=False) == 2000  # one batch, refilled as rows finish
    assert in_flight_cap(None, 2000, any_async=True) == 10_000  # awaiting checks cost no thread
    assert in_flight_cap(None, 8000, any_async=True) == 16_000


@pytest.mark.parametrize(
    ("cap", "in_flight", "batch", "expected"),
    [
        (4000, 0, 2000, 2000),
        (4000, 2000, 2000, 2000),
        (4000, 3000, 2000, 1000),
        (4000, 3600, 2000, 0),  # less than a quarter batch of room: wait
        (4000, 4000, 2000, 0),
        (4000, 5000, 2000, 0),  # over the cap (a retried ack put outcomes back)
        (1, 0, 2000, 1),  # a cap below a quarter batch still pops
        (10, 0, 1, 1),
    ],
)
def test_pop_room(cap: int, in_flight: int, batch: int, expected: int) -> None:
    assert pop_room(cap, in_flight, batch) == expected


@pytest.mark.parametrize(
    ("stuck", "threads", "expected"),
    [(0, 1, False), (1, 1, True), (1, 2, False), (2, 2, True), (128, 256, False), (129, 256, True)],
)
def test_too_many_stuck(stuck: int, threads: int, expected: bool) -> None:
    assert too_many_stuck(stuck, threads) is expected
