"""The ReadyQueue contract: one suite, run against fakeredis here (tests/unit/storage/test_queue_fake.py)
and against real Redis (tests/integration/servers/test_queue_real.py). It also proves the class
implements the Queue port the roles program against (shared/fanout/protocol.py).

Subclass `QueueContract` and provide a `queue` fixture returning a ReadyQueue whose key prefix is
private to the test (its lists start empty). Nothing here assumes more of the server than that:

    from tests.unit.queue_contract import QueueContract

    class TestRealQueue(QueueContract):
        @pytest.fixture
        def queue(self, redis_settings): ...
"""

from __future__ import annotations

import logging
import time

import pytest

from duecast.shared.entries import Entry, encode_hold
from duecast.shared.fanout.protocol import Queue
from duecast.shared.fanout.queue import QUARANTINE_CAP, QUARANTINE_ITEM_BYTES, ReadyQueue
from duecast.shared.fanout.started import STARTED_TTL_S

SHORT_TIMEOUT_S = 0.1  # BLMPOP timeout for pops expected to come back empty


def _entries(ids: range, attempt: int = 1) -> list[Entry]:
    return [Entry(i, attempt) for i in ids]


class QueueContract:
    @pytest.fixture
    def queue(self) -> ReadyQueue:
        raise NotImplementedError("subclass QueueContract and provide a `queue` fixture")

    def test_it_implements_the_queue_port(self, queue: ReadyQueue) -> None:
        port: Queue = queue  # mypy-level (also queue.py's _PORT); isinstance is the run-time check
        assert isinstance(port, Queue)

    # --- push / pop -------------------------------------------------------------------------------

    def test_push_then_pop_is_fifo_with_attempts(self, queue: ReadyQueue) -> None:
        queue.push("alpha", [Entry(5, 1), Entry(3, 2), Entry(9, 1)])
        queue.push("alpha", [Entry(1, 4)])
        assert queue.length("alpha") == 4
        assert queue.pop(["alpha"], 10, SHORT_TIMEOUT_S) == ("alpha", [b"5:1", b"3:2", b"9:1", b"1:4"])
        assert queue.length("alpha") == 0

    def test_pop_takes_at_most_count(self, queue: ReadyQueue) -> None:
        queue.push("alpha", _entries(range(1, 8)))
        assert queue.pop(["alpha"], 3, SHORT_TIMEOUT_S) == ("alpha", [b"1:1", b"2:1", b"3:1"])
        assert queue.length("alpha") == 4
        assert queue.pop(["alpha"], 3, SHORT_TIMEOUT_S) == ("alpha", [b"4:1", b"5:1", b"6:1"])
        assert queue.pop(["alpha"], 3, SHORT_TIMEOUT_S) == ("alpha", [b"7:1"])

    def test_pop_takes_from_the_first_non_empty_source_only(self, queue: ReadyQueue) -> None:
        queue.push("beta", [Entry(1, 1), Entry(2, 1)])
        queue.push("gamma", [Entry(3, 1)])
        assert queue.pop(["alpha", "beta", "gamma"], 10, SHORT_TIMEOUT_S) == ("beta", [b"1:1", b"2:1"])
        assert queue.length("gamma") == 1  # a pop never mixes sources
        assert queue.pop(["alpha", "beta", "gamma"], 10, SHORT_TIMEOUT_S) == ("gamma", [b"3:1"])

    def test_pop_follows_the_given_source_order(self, queue: ReadyQueue) -> None:
        queue.push("beta", [Entry(1, 1)])
        queue.push("gamma", [Entry(2, 1)])
        assert queue.pop(["gamma", "beta"], 10, SHORT_TIMEOUT_S) == ("gamma", [b"2:1"])

    def test_pop_returns_none_when_empty_after_the_timeout(self, queue: ReadyQueue) -> None:
        started = time.monotonic()
        assert queue.pop(["alpha", "beta"], 10, SHORT_TIMEOUT_S) is None
        assert time.monotonic() - started < 3.0  # bounded: the loop gets to check for stop

    def test_source_names_survive_the_key_round_trip(self, queue: ReadyQueue) -> None:
        name = "user_block_status_2"
        queue.push(name, [Entry(1, 1)])
        assert queue.pop([name], 1, SHORT_TIMEOUT_S) == (name, [b"1:1"])

    def test_large_push_keeps_order_across_chunks(self, queue: ReadyQueue) -> None:
        entries = _entries(range(1, 12_346), attempt=2)
        queue.push("alpha", entries)
        assert queue.length("alpha") == len(entries)
        got: list[bytes] = []
        while (popped := queue.pop(["alpha"], 5000, SHORT_TIMEOUT_S)) is not None:
            got += popped[1]
        assert got == [b"%d:2" % e.id for e in entries]

    def test_push_nothing_is_a_no_op(self, queue: ReadyQueue) -> None:
        queue.push("alpha", [])
        assert queue.length("alpha") == 0

    def test_push_raw_keeps_arbitrary_bytes(self, queue: ReadyQueue) -> None:
        raw = [b"1:1", b"1:1", b"\xff\xfe:1", b"", b"x" * 1000]
        queue.push_raw("alpha", raw)
        assert queue.pop(["alpha"], 10, SHORT_TIMEOUT_S) == ("alpha", raw)

    # --- pop_held (plain commands: MULTI and SORT ... STORE, no scripting) ------------------------

    def test_pop_held_records_the_batch_as_the_workers_hold(self, queue: ReadyQueue) -> None:
        queue.push("alpha", _entries(range(1, 6)))
        assert queue.pop_held("w1", ["alpha"], 3, SHORT_TIMEOUT_S) == ("alpha", [b"1:1", b"2:1", b"3:1"])
        assert queue.held_by("w1") == ("alpha", [b"1:1", b"2:1", b"3:1"])
        assert queue.pop_held("w1", ["alpha"], 3, SHORT_TIMEOUT_S) == ("alpha", [b"4:1", b"5:1"])
        assert queue.held_by("w1") == ("alpha", [b"4:1", b"5:1"])  # the next pop replaces it
        assert queue.pop_held("w1", ["alpha"], 3, SHORT_TIMEOUT_S) is None
        queue.release_hold("w1")
        assert queue.held_by("w1") is None

    def test_pop_held_serves_the_lists_in_turn_not_in_name_order(self, queue: ReadyQueue) -> None:
        """A flood of stale or bad entries in one list costs the others one batch per turn."""
        queue.push("alpha", _entries(range(1, 20_001)))  # e.g. stale entries of rows long done
        queue.push_raw("alpha", [b"7" * 1_000_000] * 3)  # and oversized garbage
        queue.push("beta", [Entry(5, 1)])  # one due job
        sources = ["alpha", "beta", "gamma"]
        first = queue.pop_held("w1", sources, 100, SHORT_TIMEOUT_S)
        second = queue.pop_held("w1", sources, 100, SHORT_TIMEOUT_S)
        assert first is not None
        assert first[0] == "alpha"
        assert second == ("beta", [b"5:1"])
        third = queue.pop_held("w1", sources, 100, SHORT_TIMEOUT_S)
        assert third is not None
        assert third[0] == "alpha"  # gamma is empty: back to the start

    # --- started records (fanout/started.py): what a supervisor hands back of re-scan rows ---------

    def test_releasing_a_hold_with_records_adds_them_to_the_started_hash(self, queue: ReadyQueue) -> None:
        queue.push("alpha", _entries(range(1, 4)))
        assert queue.pop_held("w1", ["alpha"], 3, SHORT_TIMEOUT_S) is not None
        first = encode_hold("alpha", [b"1:1", b"2:1"])  # what the start found still dispatched
        queue.release_hold("w1", {b"9": first})
        assert queue.held_by("w1") is None
        queue.release_hold("w1", {b"10": encode_hold("beta", [b"7:3"])})
        # In the order of the batches' numbers (9 before 10: numbers, not text).
        assert queue.started_by("w1") == [("alpha", [b"1:1", b"2:1"]), ("beta", [b"7:3"])]
        assert queue.started_by("w2") == []  # each worker's own
        ttl = queue.client.ttl(queue.keys.started("w1"))
        assert 0 < ttl <= STARTED_TTL_S  # a worker never handed back leaves nothing for good

        queue.release_hold("w1", {b"9": b""})  # that batch is over (blanked at the next release)
        assert queue.started_by("w1") == [("beta", [b"7:3"])]
        queue.release_hold("w1", {b"11": encode_hold("alpha", [b"5:2"])}, replace=True)  # the live ones
        assert queue.client.hlen(queue.keys.started("w1")) == 1
        assert queue.started_by("w1") == [("alpha", [b"5:2"])]
        queue.release_hold("w1", {b"11": b""}, replace=True)  # none live
        assert not queue.client.exists(queue.keys.started("w1"))
        queue.release_hold("w1", {b"12": first})
        queue.forget_started("w1")
        assert queue.started_by("w1") == []

    def test_a_started_record_that_does_not_parse_is_skipped_with_one_warning(
        self, queue: ReadyQueue, caplog: pytest.LogCaptureFixture
    ) -> None:
        key = queue.keys.started("w1")
        queue.client.hset(key, mapping={b"x": b"\xff\xff", b"1": encode_hold("alpha", [b"1:1"])})
        with caplog.at_level(logging.WARNING, logger="duecast.queue"):
            assert queue.started_by("w1") == [("alpha", [b"1:1"])]
        assert [getattr(r, "event", None) for r in caplog.records] == ["queue.bad_started"]

    def test_a_started_hash_of_the_wrong_type_is_moved_aside(self, queue: ReadyQueue) -> None:
        queue.client.set(queue.keys.started("w1"), b"not a hash")
        queue.release_hold("w1", {b"1": encode_hold("alpha", [b"1:1"])})
        assert queue.started_by("w1") == [("alpha", [b"1:1"])]

    def test_a_hold_written_by_an_older_release_still_reads(self, queue: ReadyQueue) -> None:
        queue.client.set(queue.keys.inflight("w1"), b"alpha\n1:1 2:1")
        assert queue.held_by("w1") == ("alpha", [b"1:1", b"2:1"])

    def test_every_push_rings_its_sources_bell_keeping_one_token(self, queue: ReadyQueue) -> None:
        queue.push("alpha", [Entry(1, 1)])
        queue.push("alpha", _entries(range(2, 12_000)))  # several chunks, one token
        queue.push_raw("beta", [b"x"])
        lengths = [queue.client.llen(queue.keys.bell(s)) for s in ("alpha", "beta", "gamma")]
        assert lengths == [1, 1, 0]
        assert queue.length("alpha") == 11_999  # the bells are not the lists

    def test_sources_are_separate_lists(self, queue: ReadyQueue) -> None:
        queue.push("alpha", [Entry(1, 1)])
        assert (queue.length("alpha"), queue.length("beta")) == (1, 0)

    # --- quarantine -------------------------------------------------------------------------------

    def test_quarantine_keeps_reason_and_raw_newest_first(self, queue: ReadyQueue) -> None:
        queue.quarantine("alpha", [(b"abc", "malformed"), (b"0:1", "malformed")])
        queue.quarantine("alpha", [(b"1:99999999999", "attempt_out_of_range")])
        assert queue.quarantined("alpha") == [
            b"attempt_out_of_range 1:99999999999",
            b"malformed 0:1",
            b"malformed abc",
        ]
        assert queue.quarantined("beta") == []
        assert queue.length("alpha") == 0  # quarantine is not the ready list

    def test_quarantine_truncates_items(self, queue: ReadyQueue) -> None:
        huge = b"7" * (10 * 1024 * 1024)
        queue.quarantine("alpha", [(huge, "too_long"), (b"\xff\xfe:1", "malformed")])
        items = queue.quarantined("alpha")
        assert items == [b"malformed \xff\xfe:1", b"too_long " + b"7" * QUARANTINE_ITEM_BYTES]

    def test_quarantine_is_capped_keeping_the_newest(self, queue: ReadyQueue) -> None:
        n = QUARANTINE_CAP + 25
        queue.quarantine("alpha", [(b"bad-%d" % i, "malformed") for i in range(n)])
        items = queue.quarantined("alpha")
        assert len(items) == QUARANTINE_CAP
        assert items[0] == b"malformed bad-%d" % (n - 1)
        assert items[-1] == b"malformed bad-%d" % (n - QUARANTINE_CAP)
        # ...and stays capped across calls.
        queue.quarantine("alpha", [(b"later", "malformed")])
        items = queue.quarantined("alpha")
        assert len(items) == QUARANTINE_CAP
        assert items[0] == b"malformed later"

    # --- stats ------------------------------------------------------------------------------------

    def test_a_counter_at_its_limit_or_not_a_number_is_reset_with_one_warning(
        self, queue: ReadyQueue, caplog: pytest.LogCaptureFixture
    ) -> None:
        # What the documented ACL lets any duecast client do: HINCRBY ... claimed 9223372036854775807.
        queue.client.hset(queue.keys.stats("alpha"), mapping={"claimed": 2**63 - 1, "acked": "junk"})
        with caplog.at_level(logging.WARNING, logger="duecast.queue"):
            queue.add_stats("alpha", {"claimed": 3, "acked": 2, "pushed": 1})
            queue.add_stats("alpha", {"claimed": 1})
        assert queue.stats("alpha") == {"claimed": 4, "acked": 2, "pushed": 1}
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1
        assert "claimed, acked" in warnings[0]
        assert "reset" in warnings[0]

    def test_stats_leave_out_values_that_are_not_sane_counts(self, queue: ReadyQueue) -> None:
        queue.client.hset(
            queue.keys.stats("alpha"),
            mapping={"claimed": 2**63 - 1, "bad": "x", "acked": -5, "pushed": 7},
        )
        assert queue.stats("alpha") == {"pushed": 7}

    def test_stats_accumulate_per_source(self, queue: ReadyQueue) -> None:
        assert queue.stats("alpha") == {}
        queue.add_stats("alpha", {"claimed": 3, "acked": 2})
        queue.add_stats("alpha", {"claimed": 4, "stale_acks": 1})
        queue.add_stats("beta", {"claimed": 1})
        assert queue.stats("alpha") == {"claimed": 7, "acked": 2, "stale_acks": 1}
        assert queue.stats("beta") == {"claimed": 1}

    def test_zero_counts_create_no_fields(self, queue: ReadyQueue) -> None:
        queue.add_stats("alpha", {"claimed": 0, "bad": 0})
        queue.add_stats("alpha", {})
        assert queue.stats("alpha") == {}
        queue.add_stats("alpha", {"claimed": 0, "bad": 2})
        assert queue.stats("alpha") == {"bad": 2}

    # --- keys -------------------------------------------------------------------------------------

    def test_all_keys_live_under_the_prefix_hash_tag(self, queue: ReadyQueue) -> None:
        queue.push("alpha", [Entry(1, 1)])
        queue.quarantine("alpha", [(b"x", "malformed")])
        queue.add_stats("alpha", {"claimed": 1})
        keys = [
            queue.keys.ready("alpha"),
            queue.keys.bell("alpha"),
            queue.keys.quarantine("alpha"),
            queue.keys.stats("alpha"),
        ]
        assert queue.client.exists(*keys) == 4
        tag = "{" + queue.keys.prefix + "}:"
        found = {k.decode() for k in queue.client.scan_iter(match=tag + "*")}
        assert found == set(keys)
