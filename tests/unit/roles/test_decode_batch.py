"""duecast.worker.starting.decode_batch: what a popped batch becomes before any row is locked."""

from __future__ import annotations

from duecast.shared.entries import Entry, encode_entry
from duecast.worker.starting import decode_batch


def test_all_valid_unique() -> None:
    raws = [encode_entry(i, 1) for i in range(1, 6)]
    entries, bad, dupes = decode_batch(raws)
    assert entries == [Entry(i, 1) for i in range(1, 6)]
    assert (bad, dupes) == ([], 0)


def test_exact_duplicates_dropped_keeping_first_order() -> None:
    raws = [b"3:1", b"1:1", b"3:1", b"2:1", b"1:1", b"3:1"]
    entries, bad, dupes = decode_batch(raws)
    assert entries == [Entry(3, 1), Entry(1, 1), Entry(2, 1)]
    assert bad == []
    assert dupes == 3


def test_same_id_other_attempt_is_not_a_duplicate() -> None:
    """Two attempts of one row are both kept: the fence decides which (if any) is current."""
    entries, _, dupes = decode_batch([b"7:1", b"7:2", b"7:1"])
    assert entries == [Entry(7, 1), Entry(7, 2)]
    assert dupes == 1


def test_bad_entries_reported_with_reasons_and_counted_apart() -> None:
    long = b"9" * 1000
    raws = [
        b"1:1",
        b"",
        b"abc",
        b"1:1",
        long,
        b"%d:1" % 2**63,
        b"1:%d" % 2**32,
        b"\xff\xfe:1",
        b"2:1",
        b"abc",
    ]
    entries, bad, dupes = decode_batch(raws)
    assert entries == [Entry(1, 1), Entry(2, 1)]
    assert bad == [
        (b"", "malformed"),
        (b"abc", "malformed"),
        (long, "too_long"),
        (b"%d:1" % 2**63, "id_out_of_range"),
        (b"1:%d" % 2**32, "attempt_out_of_range"),
        (b"\xff\xfe:1", "malformed"),
        (b"abc", "malformed"),  # bad duplicates are all reported: each one was in the list
    ]
    assert dupes == 1
    assert len(entries) + len(bad) + dupes == len(raws)


def test_empty_batch() -> None:
    assert decode_batch([]) == ([], [], 0)


def test_counts_always_add_up() -> None:
    raws = [b"%d:%d" % (i % 13 + 1, i % 3 + 1) for i in range(500)] + [b"x"] * 7
    entries, bad, dupes = decode_batch(raws)
    assert len(entries) == 13 * 3
    assert len(bad) == 7
    assert len(entries) + len(bad) + dupes == len(raws)
    assert len(set(entries)) == len(entries)
