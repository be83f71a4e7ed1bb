"""The acker's split of a flight's outcomes into acks to apply and failures (worker/acker.py): order
kept, an Ack the store refuses fails its rows with the reason, and a Store asked once per Ack object."""

from __future__ import annotations

from typing import Any, cast

from duecast.shared.acks import Ack, Row
from duecast.shared.api.outcomes import InvalidAck
from duecast.shared.storage.source_store import Store
from duecast.worker.acker import _sorted
from duecast.worker.flight import Outcome

BAD = Ack.touch(user_id=5)


class _Store:
    def __init__(self) -> None:
        self.asked: list[Ack] = []

    def group_key(self, ack: Ack) -> Any:
        self.asked.append(ack)
        if ack is BAD:
            raise ValueError("Ack.touch sets 'user_id'")
        return ("touch",)


def _rows(n: int) -> list[Row]:
    return [{"user_id": i} for i in range(n)]


def test_every_outcome_a_good_ack_is_acked_as_it_came_with_one_question_per_ack() -> None:
    store, rows, touch = _Store(), _rows(4), Ack.touch(status=2)
    done: list[tuple[Row, Outcome]] = [
        (rows[0], Ack.default()),
        (rows[1], touch),
        (rows[2], touch),
        (rows[3], Ack.default()),
    ]
    acks, failed = _sorted(cast(Store, store), done)
    assert acks is done  # no second list
    assert failed == []
    assert store.asked == [Ack.default(), touch]


def test_exceptions_and_refused_acks_fail_their_rows_alone_in_order() -> None:
    store, rows, boom = _Store(), _rows(5), RuntimeError("boom")
    done: list[tuple[Row, Outcome]] = [
        (rows[0], Ack.default()),
        (rows[1], boom),
        (rows[2], BAD),
        (rows[3], Ack.default()),
        (rows[4], BAD),
    ]
    acks, failed = _sorted(cast(Store, store), done)
    assert acks == [(rows[0], Ack.default()), (rows[3], Ack.default())]
    assert [row["user_id"] for row, _ in failed] == [1, 2, 4]
    assert failed[0][1] is boom
    refusals = [outcome for _, outcome in failed[1:]]
    assert all(isinstance(o, InvalidAck) and "Ack.touch sets 'user_id'" in str(o) for o in refusals)
    assert refusals[0] is refusals[1]  # one refusal per Ack object, as asked once
    assert store.asked == [Ack.default(), BAD]
