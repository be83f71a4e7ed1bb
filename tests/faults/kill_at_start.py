"""`python -m tests.faults.kill_at_start`: the real worker, whose first start with rows of each source
loses its session at the COMMIT: the COMMIT is sent and applied (the rows, or a job queue's runs, are
RUNNING under their attempt), then the session is KILLed from another connection and its answer never
read, so the worker sees a lost connection (2013) and cannot know that its start committed (issue
24.5: such rows waited for their lease, about 15 s, and counted an interruption).

Each fault writes {"source", "rows" ([id, attempt] as the handlers get them), "at" (time.time())} to
DUECAST_TEST_KILL_AT_COMMIT_DIR/<source>-<pid>.json. The instant is reached by wrapping the driver's
`commit` in this process only: production code carries no fault branch.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pymysql

from duecast.shared.storage import db
from duecast.worker.main import main
from tests.faults.kill_at_commit import commit_then_kill

log = logging.getLogger("tests.faults")
_fired: set[str] = set()  # sources whose start lost its session already (once each per process)
_commit = db._Connection.commit


def commit(self: Any) -> None:
    started = _start_on_stack()
    if started is None or started[0] in _fired:
        _commit(self)
        return
    source, rows = started
    _fired.add(source)
    session = commit_then_kill(self)
    marker = Path(os.environ["DUECAST_TEST_KILL_AT_COMMIT_DIR"]) / f"{source}-{os.getpid()}.json"
    # Whole or absent: the test reads the marker the moment it exists.
    marker.with_suffix(".tmp").write_text(json.dumps({"source": source, "rows": rows, "at": time.time()}))
    marker.with_suffix(".tmp").replace(marker)
    log.warning(
        "fault: session %s KILLed at the COMMIT of a start of %d rows of %s", session, len(rows), source
    )
    raise pymysql.err.OperationalError(2013, "Lost connection to server during query (fault: KILL at COMMIT)")


def _start_on_stack() -> tuple[str, list[list[int]]] | None:
    """(source, [id, attempt] of the rows it marks RUNNING) when this COMMIT is a store's start's own,
    with rows to start: the innermost `start` of a store on the stack, whose rows are its local `rows`
    (a source's, a range source's spans) or `began.rows` (a job queue's, a cluster group's)."""
    frame = sys._getframe()
    while frame is not None:
        store = frame.f_locals.get("self")
        if frame.f_code.co_name == "start" and hasattr(store, "src"):
            began = frame.f_locals.get("began")
            rows = frame.f_locals.get("rows") if began is None else began.rows
            if not rows:
                return None
            key = str(store.id_column)
            return str(store.src.name), [[int(r[key]), int(r["dc_attempt"])] for r in rows]
        frame = frame.f_back  # type: ignore[assignment]
    return None


if __name__ == "__main__":
    db._Connection.commit = commit  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
