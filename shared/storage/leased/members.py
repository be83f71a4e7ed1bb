"""The codec of a job run's members (the runs table's `members`): ascending ids as `a-b,c,...`.

Jobs enqueued together have consecutive ids, so a run of 500 of them is usually one `a-b` item.
"""

from __future__ import annotations

from collections.abc import Iterable


def encode_members(ids: Iterable[int]) -> str:
    """Ids (any order, no repeats needed) -> `a-b,c`: runs of consecutive ids as ranges."""
    out: list[str] = []
    ordered = sorted(set(ids))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def decode_members(text: str | bytes) -> list[int]:
    """`a-b,c` -> [a, ..., b, c]. The text is duecast's own; anything else raises ValueError."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    ids: list[int] = []
    for item in text.split(","):
        if not item:
            continue
        lo, dash, hi = item.partition("-")
        first = int(lo)
        last = int(hi) if dash else first
        if last < first:
            raise ValueError(f"bad member range {item!r}")
        ids.extend(range(first, last + 1))
    return ids


def member_ranges(text: str | bytes) -> list[tuple[int, int]]:
    """`a-b,c` -> [(a, b), (c, c)], not expanded: for asking whether a few ids are among them."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    out: list[tuple[int, int]] = []
    for item in text.split(","):
        if item:
            lo, dash, hi = item.partition("-")
            out.append((int(lo), int(hi) if dash else int(lo)))
    return out
