"""Entry codec (shared/entries.py) and key names (shared/fanout/keys.py): what a worker will and will
not accept from the list.

The property checks here use a seeded RNG so they always run; test_properties_hypothesis.py adds
shrinking, edge-biased versions when hypothesis is installed.
"""

from __future__ import annotations

import random
import re

import pytest

from duecast.shared.entries import (
    MAX_ATTEMPT,
    MAX_ID,
    BadEntry,
    BadHold,
    Entry,
    decode_entry,
    decode_hold,
    encode_entry,
)
from duecast.shared.fanout.keys import Keys

SEED = 20240611


@pytest.mark.parametrize(
    ("id_", "attempt"),
    [(1, 1), (5, 3), (MAX_ID, 1), (1, MAX_ATTEMPT), (MAX_ID, MAX_ATTEMPT), (10**18, 10**9)],
)
def test_round_trip(id_: int, attempt: int) -> None:
    raw = encode_entry(id_, attempt)
    assert raw == f"{id_}:{attempt}".encode("ascii")
    assert decode_entry(raw) == Entry(id_, attempt)


def test_largest_entry_fits_the_size_limit() -> None:
    """The size check runs before parsing, so it must never reject a valid entry."""
    assert decode_entry(encode_entry(MAX_ID, MAX_ATTEMPT)) == Entry(MAX_ID, MAX_ATTEMPT)


BAD_ENTRIES: list[tuple[bytes, str]] = [
    (b"", "malformed"),
    (b"abc", "malformed"),
    (b"-5:1", "malformed"),
    (b"5:-1", "malformed"),
    (b"+5:1", "malformed"),
    (b"1.5:1", "malformed"),
    (b"5", "malformed"),
    (b"5:", "malformed"),
    (b":5", "malformed"),
    (b":", "malformed"),
    (b"5:1:1", "malformed"),
    (b"0:1", "malformed"),
    (b"5:0", "malformed"),
    (b"01:1", "malformed"),
    (b"1:01", "malformed"),
    (b"0x10:1", "malformed"),
    (b"1_000:1", "malformed"),
    (b"1e3:1", "malformed"),
    (b"x" * (10 * 1024 * 1024), "too_long"),
    (b"1" * 31, "too_long"),
    (b"\xff\xfe:1", "malformed"),
    (b"5\x00:1", "malformed"),
    ("١٢:1".encode(), "malformed"),  # Arabic-Indic digits: int() would accept them
    ("\uff15:1".encode(), "malformed"),  # fullwidth digit five
    (b"%d:1" % 2**63, "id_out_of_range"),
    (b"%d:1" % (10**19 - 1), "id_out_of_range"),
    (b"%d:1" % 10**19, "malformed"),  # 20 digits: not even a BIGINT literal
    (b"1:%d" % 2**32, "attempt_out_of_range"),
    (b"1:%d" % (10**10 - 1), "attempt_out_of_range"),
    (b"1:%d" % 10**10, "malformed"),
    (b" 5:1", "malformed"),
    (b"5:1 ", "malformed"),
    (b"5 :1", "malformed"),
    (b"5:1\n", "malformed"),
    (b"\n5:1", "malformed"),
    (b"5:1\r\n", "malformed"),
    (b"\t5:1", "malformed"),
]


@pytest.mark.parametrize(("raw", "reason"), BAD_ENTRIES, ids=lambda v: repr(v)[:40])
def test_bad_entry_rejected_with_stable_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(BadEntry) as info:
        decode_entry(raw)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError)  # callers catching ValueError still catch it
    assert str(info.value) == reason


def test_reason_labels_are_short_and_log_safe() -> None:
    """Reasons become quarantine prefixes and metric labels: never the input, never whitespace."""
    for raw, _ in BAD_ENTRIES:
        with pytest.raises(BadEntry) as info:
            decode_entry(raw)
        assert re.fullmatch(r"[a-z_]{1,32}", info.value.reason)


def test_round_trip_property_seeded() -> None:
    rng = random.Random(SEED)
    for _ in range(5000):
        # Bias towards both ends of each range: where off-by-one bugs live.
        id_ = rng.choice([rng.randint(1, MAX_ID), rng.randint(1, 1000), MAX_ID - rng.randint(0, 1000)])
        attempt = rng.choice([rng.randint(1, MAX_ATTEMPT), rng.randint(1, 10), MAX_ATTEMPT])
        assert decode_entry(encode_entry(id_, attempt)) == Entry(id_, attempt)


def _fuzz_bytes(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:  # anything at all
        return rng.randbytes(rng.randrange(0, 40))
    if kind == 1:  # entry-shaped: digits, colons, signs, spaces
        return bytes(rng.choice(b"0123456789::-+ .\n") for _ in range(rng.randrange(0, 34)))
    if kind == 2:  # a valid entry with one byte changed
        raw = bytearray(encode_entry(rng.randint(1, MAX_ID), rng.randint(1, MAX_ATTEMPT)))
        raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    return "".join(rng.choice("0123456789:١٢٣٤٥٦٧٨٩٠") for _ in range(rng.randrange(0, 12))).encode()


def test_decode_only_ever_raises_bad_entry_seeded() -> None:
    rng = random.Random(SEED)
    for _ in range(20_000):
        raw = _fuzz_bytes(rng)
        try:
            entry = decode_entry(raw)
        except BadEntry:
            continue
        # Whatever is accepted is exactly the canonical encoding of an in-range entry.
        assert 1 <= entry.id <= MAX_ID
        assert 1 <= entry.attempt <= MAX_ATTEMPT
        assert encode_entry(entry.id, entry.attempt) == raw


# --- keys -------------------------------------------------------------------------------------------


def _hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: the text between the first '{' and the next '}'."""
    start = key.find("{")
    end = key.find("}", start + 1)
    if start < 0 or end < 0 or end == start + 1:
        return key
    return key[start + 1 : end]


PREFIXES = ["duecast", "duecast-test-0a1b", "a", "x.y:z", "ns:app:1", "_", "A" * 64]
SOURCES = ["jobs", "users", "user_block_status", "a", "a1_b2", "z" * 48]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_every_key_carries_the_prefix_hash_tag(prefix: str) -> None:
    keys = Keys(prefix)
    for source in SOURCES:
        made = [keys.ready(source), keys.quarantine(source), keys.stats(source)]
        for key in made:
            assert key.startswith("{" + prefix + "}:")
            assert _hash_tag(key) == prefix  # all of a prefix's keys land in one cluster slot
        assert len(set(made)) == 3  # the three kinds never collide
        assert all(key.endswith(":" + source) for key in made)


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("source", SOURCES)
def test_source_of_ready_inverts_ready(prefix: str, source: str) -> None:
    keys = Keys(prefix)
    ready = keys.ready(source)
    assert keys.source_of_ready(ready) == source
    assert keys.source_of_ready(ready.encode()) == source  # redis-py replies are bytes


def test_ready_keys_of_different_sources_or_prefixes_differ() -> None:
    made = {Keys(p).ready(s) for p in PREFIXES for s in SOURCES}
    assert len(made) == len(PREFIXES) * len(SOURCES)


def test_a_hold_record_parses_to_its_source_and_raw_entries() -> None:
    assert decode_hold(b"users\n1:1 2:3") == ("users", [b"1:1", b"2:3"])
    assert decode_hold(b"topics.orders-billing\n7:1") == ("topics.orders-billing", [b"7:1"])
    assert decode_hold(b"jobs.default\n1:1 \xff 3:1") == ("jobs.default", [b"1:1", b"\xff", b"3:1"])


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b"\xff" * 30, "no_source_line"),
        (b"users", "no_source_line"),
        (b"\xffusers\n1:1", "bad_source"),
        (b"\n1:1", "bad_source"),
        (b"us ers\n1:1", "bad_source"),
        (b"u" * 129 + b"\n1:1", "bad_source"),
        ("usérs\n1:1".encode(), "bad_source"),
    ],
)
def test_a_hold_record_that_does_not_parse_says_why(record: bytes, reason: str) -> None:
    with pytest.raises(BadHold) as info:
        decode_hold(record)
    assert (info.value.reason, info.value.raw) == (reason, record)
