"""`python -m tests.faults.kill_at_commit`: the real dispatcher, whose first claim with entries of each
source loses its session at the COMMIT: the COMMIT is sent and applied, then the session is KILLed
from another connection and its answer never read, so the dispatcher sees a lost connection (2013)
and cannot know that the claim committed (issue 24.5: such a claim's jobs ran 76 s later).

Each fault writes {"source", "entries", "at" (time.time())} to DUECAST_TEST_KILL_AT_COMMIT_DIR/<source>.json.
The instant is reached by wrapping the stores' `claiming` and the driver's `commit` in this process
only: production code carries no fault branch.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql

from duecast.dispatcher.main import main
from duecast.shared.entries import Entry
from duecast.shared.storage import db, source_store
from duecast.shared.storage.leased import jobs, row_units

log = logging.getLogger("tests.faults")
_claim = threading.local()  # the entries of the claim this thread is running, if any
_fired: set[str] = set()  # sources whose claim lost its session already (once each)
_commit = db._Connection.commit
_claiming = source_store.claiming


@contextmanager
def claiming(entries: list[Entry]) -> Iterator[None]:
    _claim.entries = entries
    try:
        with _claiming(entries):
            yield
    finally:
        _claim.entries = None


def commit(self: Any) -> None:
    entries: list[Entry] | None = getattr(_claim, "entries", None)
    source = _source_of(entries)
    if not entries or source is None or source in _fired:
        _commit(self)
        return
    _fired.add(source)
    session = commit_then_kill(self)
    marker = Path(os.environ["DUECAST_TEST_KILL_AT_COMMIT_DIR"]) / f"{source}.json"
    body = {"source": source, "entries": [[e.id, e.attempt] for e in entries], "at": time.time()}
    # Whole or absent: the test reads the marker the moment it exists (it once read it empty).
    marker.with_suffix(".tmp").write_text(json.dumps(body))
    marker.with_suffix(".tmp").replace(marker)
    log.warning(
        "fault: session %s KILLed at the COMMIT of a claim of %d entries of %s", session, len(entries), source
    )
    raise pymysql.err.OperationalError(2013, "Lost connection to server during query (fault: KILL at COMMIT)")


def commit_then_kill(conn: Any) -> int:
    """COMMIT on `conn` (the server applies it), then KILL its session from another connection, so
    that the answer is what the fault takes away; returns the session's id."""
    _commit(conn)
    session = int(conn.thread_id())
    killer = pymysql.connect(
        host=conn.host, port=conn.port, user=conn.user, password=conn.password, unix_socket=conn.unix_socket
    )
    try:
        with killer.cursor() as cur:
            cur.execute(f"KILL {session}")
    finally:
        killer.close()
    return session


def _source_of(entries: list[Entry] | None) -> str | None:
    """Which source the running claim is of: the one whose store's claim_due is on the stack."""
    if not entries:
        return None
    frame = sys._getframe()
    while frame is not None:
        store = frame.f_locals.get("self")
        if frame.f_code.co_name == "claim_due" and store is not None and hasattr(store, "src"):
            return str(store.src.name)
        frame = frame.f_back  # type: ignore[assignment]
    return None


if __name__ == "__main__":
    source_store.claiming = claiming  # type: ignore[assignment]
    jobs.claiming = claiming  # type: ignore[assignment]
    row_units.claiming = claiming  # type: ignore[assignment]
    db._Connection.commit = commit  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
