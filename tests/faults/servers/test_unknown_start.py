"""Issue 24.5: a worker start whose COMMIT's outcome is unknown is settled as soon as the server
answers, not waited out. Two real workers (tests/faults/kill_at_start.py) each lose their session at
the COMMIT of their first start of a re-scan source's rows and of a job queue's runs: the start
committed, the answer never came. Before, the worker's retry found those rows RUNNING and skipped
them: they came back only by their lease (about 15 s) and counted an interruption; now the retry
re-reads them under the start's own fence (attempt, and the time it wrote) and runs them under that
attempt. Measured from the fault to the last row run, printed (`-s`); docs/reliability.md quotes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import Settings
from tests.faults.checker import Verdict, classify, read_log
from tests.faults.conftest import SESSION_LOST, FaultEnv
from tests.faults.servers.ha_app import JOBS
from tests.faults.servers.test_unknown_commit import jobs_left, jobs_settings  # noqa: F401 (a fixture)

pytestmark = pytest.mark.faults

APP = "tests.faults.servers.ha_app"
ROWS = 500
JOB_COUNT = 300  # 3 runs of 100
RECOVER_S = 20.0  # the lease (15 s) plus its sweep was what the started rows waited for before
ALLOW = (*SESSION_LOST, "CommitUnknown", "StartUnknown")


def test_a_start_whose_commit_answer_was_lost_runs_its_rows_at_once(
    fault_env: Callable[..., FaultEnv],
    jobs_settings: tuple[Settings, dict[str, object]],  # noqa: F811
    tmp_path: Path,
) -> None:
    settings, jobs = jobs_settings
    # The default visibility timeout: a requeue by it cannot pass for a recovery.
    env = fault_env("rescan", claim_batch=ROWS, visibility_timeout_s=60)
    faults = tmp_path / "faults"
    faults.mkdir()
    for key in [k for k in env.env if k.startswith("DUECAST_JOBS")]:  # the fault tier's "no jobs"
        del env.env[key]
    env.env.update(
        {
            "DUECAST_JOBS": json.dumps(jobs),
            "DUECAST_TEST_KILL_AT_COMMIT_DIR": str(faults),
            "DUECAST_TEST_ROW_DELAY_MS": "2",
        }
    )
    ids = env.insert(ROWS)
    job_ids = [
        int(j) for j in Enqueuer(settings, None).enqueue_many([Job("ha_job", i) for i in range(JOB_COUNT)])
    ]
    workers = [
        env.procs.spawn(name, ["-m", "tests.faults.kill_at_start", "--app", APP], env.env, allow=ALLOW)
        for name in ("w1", "w2")
    ]
    env.dispatcher(allow=ALLOW)

    sources = {env.source.name: set(ids), JOBS: set(job_ids)}

    def fired() -> dict[str, list[dict[str, object]]]:
        found: dict[str, list[dict[str, object]]] = {}
        for marker in faults.glob("*.json"):
            body = json.loads(marker.read_text())
            found.setdefault(str(body["source"]), []).append(body)
        return found

    env.wait_for(lambda: set(fired()) == set(sources), "a start of each kind to lose its session at COMMIT")
    done_at: dict[str, float] = {}

    def all_ran() -> bool:
        log = read_log(env.exec_log)
        for source, expected in sources.items():
            if source not in done_at and expected <= {e.id for e in log if e.source == source}:
                done_at[source] = time.time()
        return len(done_at) == len(sources)

    env.wait_for(all_ran, "every row and job to run", timeout=120)
    faults_seen = fired()
    took = {s: done_at[s] - min(float(str(f["at"])) for f in faults_seen[s]) for s in sources}
    print(
        f"\nworker start's COMMIT answer lost (session KILLed; {len(faults_seen[env.source.name])} starts of "
        f"rows, {len(faults_seen[JOBS])} of job runs): all {ROWS} rows ran {took[env.source.name]:.1f}s and "
        f"all {JOB_COUNT} jobs {took[JOBS]:.1f}s after the first fault"
    )
    env.wait_for(lambda: not env.pending() and jobs_left(env, settings) == 0, "every row and job done")

    log = read_log(env.exec_log)
    verdicts: dict[str, Verdict] = {
        env.source.name: classify(log, env.source.name, ids, env.pending(), env.column("checked_by_attempt")),
        JOBS: classify(log, JOBS, job_ids),
    }
    for source, verdict in verdicts.items():
        assert not verdict.lost, source
        assert not verdict.duplicates, source  # no (id, attempt) ran twice
        assert not verdict.unexpected, source
        assert not verdict.wrong_outcome, source
        # Each ran under one attempt only: none was requeued, by a lease or a timeout, and run again.
        assert not verdict.redundant, source
        for fault in faults_seen[source]:
            for id_, attempt in fault["rows"]:  # type: ignore[attr-defined]
                # ...and the rows of each cut-off start ran under the attempt that start gave them.
                assert verdict.attempts(int(id_)) == [int(attempt)], (source, id_)
    interrupted = env.query(f"SELECT COALESCE(SUM(`interruptions`), 0) FROM `{settings.jobs.table}`")
    assert int(interrupted[0][0]) == 0, "no job counted an interruption"
    said = "".join(w.log.read_text() for w in workers)
    settled = sum(len(f) for f in faults_seen.values())
    assert said.count("got no answer to its COMMIT; it had committed") == settled, (
        "each start settled, and said so"
    )
    assert "Traceback" not in said
    assert all(w.alive() for w in workers)
    assert max(took.values()) <= RECOVER_S, took
