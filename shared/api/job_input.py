"""One job, checked before anything is written: every field's type and range, the payload as
JSON text (no pickle, capped size and depth, storable in utf8mb4). Pure: no I/O, no clock but the
bound on run_at. `shared/storage/job_writer.py` writes what `encode` returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..limits import delay_refusal, moment_refusal
from ..limits import shown as _shown
from ..settings import JobsSettings
from ..storage.job_writer import EnqueueError, JobRow

TEXT_CHARS = 191  # task and unique_key: VARCHAR(191), the most utf8mb4 an index prefix took in 5.6
META_BYTES = 4096  # a job's meta, as JSON
MAX_PAYLOAD_DEPTH = 100  # nesting of lists and objects: MySQL's own JSON limit
# Jobs one enqueue_many (or `duecast enqueue --file`) writes in its one transaction: all or none is
# the promise, so a larger batch is refused, never split (about 0.5 KiB of memory per job, and an
# undo log as large on the server). Split the jobs over several calls.
MAX_JOBS_PER_CALL = 100_000
ON_DUPLICATE = ("error", "keep")


@dataclass(frozen=True)
class Job:
    """One job to enqueue. Times: `delay_s` after the database's NOW(6), or `run_at` (aware)."""

    task: str
    payload: Any = None
    queue: str = "default"
    delay_s: float = 0.0
    run_at: datetime | None = None
    priority: int = 0  # 0-9, 0 runs first
    max_attempts: int | None = None  # None: jobs.max_attempts
    unique_key: str | None = None  # at most one pending or running job of this task per key
    # Strings middleware carries from enqueue to the run (a trace context): JobContext.meta.
    meta: Mapping[str, str] | None = None
    # What it is run for (an account, a tenant): in a queue with `[jobs.key_limits.<queue>]`, at most
    # max_running_per_key jobs of one key run at once, and the keys are served in turn.
    concurrency_key: str | None = None


def encode(job: Job, jobs: JobsSettings, tasks: frozenset[str] | None) -> JobRow:
    """Validate one job; raises EnqueueError naming the field and what is wrong. Every value is
    checked for its type too: a JSON Lines file or a caller may pass anything."""
    _check_text("task", job.task)
    if tasks is not None and job.task not in tasks:
        raise EnqueueError(f"unknown task {job.task!r}; registered: {', '.join(sorted(tasks)) or 'none'}")
    if not isinstance(job.queue, str) or job.queue not in jobs.queues:
        raise EnqueueError(f"unknown queue {_shown(job.queue)}; jobs.queues is {', '.join(jobs.queues)}")
    delay_us = _delay_us(job.delay_s, jobs.max_delay_s)
    if type(job.priority) is not int or not 0 <= job.priority <= 9:
        raise EnqueueError(f"priority must be an int 0-9 (0 runs first), not {_shown(job.priority)}")
    attempts = jobs.max_attempts if job.max_attempts is None else job.max_attempts
    if type(attempts) is not int or not 1 <= attempts <= 10_000:
        raise EnqueueError(f"max_attempts must be an int 1-10000, not {_shown(attempts)}")
    if job.unique_key is not None:
        _check_text("unique_key", job.unique_key)
        if job.unique_key.endswith(" "):
            # MySQL compares VARCHARs padded with spaces (PAD SPACE): 'k1 ' would be the key 'k1'.
            raise EnqueueError(
                f"unique_key {_shown(job.unique_key)} ends in a space, which MySQL ignores when it "
                "compares keys (it would be the same key without it); strip it"
            )
    if job.concurrency_key is not None:
        _check_key(job.concurrency_key)
    return JobRow(
        job.queue,
        job.task,
        _payload_text(job, jobs.max_payload_bytes),
        job.priority,
        attempts,
        job.unique_key,
        _utc(job.run_at, jobs.max_delay_s),
        delay_us,
        meta=_meta_text(job.meta),
        concurrency_key=job.concurrency_key,
    )


def _check_key(key: object) -> None:
    """A concurrency key: a VARCHAR(191) utf8mb4 value that MySQL compares as given."""
    _check_text("concurrency_key", key)
    assert isinstance(key, str)
    if key.endswith(" "):  # PAD SPACE: 'acct ' would be the key 'acct'
        raise EnqueueError(
            f"concurrency_key {_shown(key)} ends in a space, which MySQL ignores when it compares "
            "keys; strip it"
        )


def _meta_text(meta: object) -> str | None:
    """meta as stored: a JSON object of strings, at most META_BYTES (trace headers are ~100)."""
    if meta is None:
        return None
    if not isinstance(meta, Mapping) or not all(isinstance(k, str) for k in meta):
        raise EnqueueError(f"meta must map strings to strings, not {_shown(meta)}")
    if not all(isinstance(v, str) for v in meta.values()):
        raise EnqueueError(f"meta must map strings to strings, not {_shown(meta)}")
    text = json.dumps(dict(meta), ensure_ascii=False, separators=(",", ":"))
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise EnqueueError("meta holds a lone surrogate, which utf8mb4 cannot store") from exc
    if size > META_BYTES:
        raise EnqueueError(f"meta is {size} bytes of JSON; the limit is {META_BYTES}")
    return text or None


def check_on_duplicate(on_duplicate: object) -> None:
    """on_duplicate is "error" or "keep"; anything else is a mistake, refused in one line."""
    if not isinstance(on_duplicate, str) or on_duplicate not in ON_DUPLICATE:
        raise EnqueueError(f'on_duplicate must be "error" or "keep", not {_shown(on_duplicate)}')


def check_count(count: int, what: str = "enqueue_many", split: str = "split them over several calls") -> None:
    """At most MAX_JOBS_PER_CALL jobs in one transaction."""
    if count > MAX_JOBS_PER_CALL:
        raise EnqueueError(
            f"{what} of more than {MAX_JOBS_PER_CALL:,} jobs in one transaction is refused; {split}"
        )


def _check_text(field: str, value: object) -> None:
    """task and unique_key: VARCHAR(191) utf8mb4 columns."""
    if not isinstance(value, str) or not 1 <= len(value) <= TEXT_CHARS:
        raise EnqueueError(f"{field} must be a string of 1-{TEXT_CHARS} characters, not {_shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnqueueError(
            f"{field} {_shown(value)} holds a lone surrogate, which utf8mb4 cannot store"
        ) from exc


def _delay_us(delay_s: object, max_delay_s: float) -> int:
    """delay_s in microseconds, within shared.limits' cap (which every Ack obeys too)."""
    why = delay_refusal(delay_s, max_delay_s)
    if why is not None:
        raise EnqueueError(f"delay_s {why}")
    assert isinstance(delay_s, int | float)
    return round(delay_s * 1_000_000)


def _payload_text(job: Job, limit: int) -> str:
    if not _depth_within(job.payload, MAX_PAYLOAD_DEPTH):
        raise EnqueueError(f"payload of {job.task!r} is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    try:
        # allow_nan=False: NaN/Infinity are not JSON. Never pickle: payloads are data, not code.
        text = json.dumps(job.payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise EnqueueError(f"payload of {job.task!r} is not JSON-serialisable: {exc}") from exc
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise EnqueueError(f"payload of {job.task!r} is {size} bytes; the limit is {limit}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnqueueError(
            f"payload of {job.task!r} holds a lone surrogate, which utf8mb4 cannot store"
        ) from exc
    return text


def _depth_within(value: Any, limit: int) -> bool:
    """Whether lists and dicts nest at most `limit` deep; a loop, not recursion, so a hostile
    payload cannot exhaust the stack (a cycle nests without end: refused)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def _utc(at: object, max_delay_s: float) -> datetime | None:
    """run_at as a naive UTC datetime, between 1970 and jobs.max_delay_s ahead (shared.limits). The
    app clock only bounds it (due-ness is still decided by NOW(6)): a clock off by minutes moves no job."""
    if at is None:
        return None
    why = moment_refusal(at, datetime.now(UTC), max_delay_s)
    if why is not None:
        raise EnqueueError(f"run_at {why}")
    assert isinstance(at, datetime)
    return at.astimezone(UTC).replace(tzinfo=None)
