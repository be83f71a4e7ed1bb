"""A worker start of job runs whose COMMIT got no answer (issue 24.5), in process on real MariaDB: the
session is KILLed right after the start's COMMIT was applied (tests/faults/kill_at_start.py's fault).
The worker's retry adopts the runs it did start: every job runs once, under its first attempt, with
no interruption counted and no lease waited for."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from duecast.shared.storage import db
from tests.faults import kill_at_start
from tests.integration import jobs_app
from tests.integration.jobs.jobs_env import JobsEnv, payloads

pytestmark = pytest.mark.integration
JOBS = 250  # 3 runs: the cut-off start holds them all (the run size is 100)


def test_job_runs_whose_start_lost_its_commit_answer_run_once_at_once(
    env: JobsEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [env.enqueuer.enqueue("record", n) for n in range(JOBS)]
    monkeypatch.setenv("DUECAST_TEST_KILL_AT_COMMIT_DIR", str(tmp_path))
    monkeypatch.setattr(kill_at_start, "_fired", set())
    monkeypatch.setattr(db._Connection, "commit", kill_at_start.commit)
    env.run_once()
    (marker,) = tmp_path.glob("*.json")
    cut = json.loads(marker.read_text())
    assert cut["source"] == "jobs.default"
    assert cut["rows"], "the cut-off start had started jobs"
    assert Counter(payloads()) == Counter(range(JOBS)), "every job ran, once"
    assert len(jobs_app.RUNS) == JOBS
    env.sql.execute(
        f"SELECT COUNT(*), COALESCE(SUM(interruptions), 0) FROM `{env.table}` WHERE id IN %s", (ids,)
    )
    assert env.sql.fetchone() == (0, 0), "all done (deleted), none interrupted"
    assert env.runs("id") == []
