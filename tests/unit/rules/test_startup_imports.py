"""What a cold start imports (issue 28, docs/benchmarks.md "Cold start"): `import duecast` stays light,
so a role's entry module can pause the garbage collector before the role's own imports; the roles
import nothing their first job does not need (APScheduler, the dashboard, the CLI's tables); and the
collector paused at start-up is running again, the start-up's objects frozen, once settings are loaded.

Each check runs in a fresh interpreter (one ~0.5 s spawn): what this test process imported says nothing.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

from duecast.shared.process import collector

# Loaded by an operator's command or a schedule, never by a role before its first job.
NOT_AT_START = ("apscheduler", "rich", "flask", "waitress", "werkzeug", "jinja2", "duecast.cli")
# What `import duecast` must not load: the libraries the roles import after pausing the collector.
NOT_IN_FACE = ("pydantic", "redis", "pymysql", "prometheus_client", "duecast.shared.settings")

PROBE = """
import gc, json, sys
import duecast
face = sorted(sys.modules)
from duecast.shared.process import collector
collector.pause()
paused = not gc.isenabled()
import duecast.dispatcher.main, duecast.worker.main
from duecast.shared.process.runtime import start_process
start_process(None)
print(json.dumps({"face": face, "roles": sorted(sys.modules), "paused": paused,
                  "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                  "threshold": gc.get_threshold()}))
"""


def _probe() -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUECAST_")}  # settings at defaults
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _loaded(modules: object, names: tuple[str, ...]) -> list[str]:
    assert isinstance(modules, list)
    return sorted({n for n in names for m in modules if m == n or m.startswith(f"{n}.")})


def test_a_cold_start_imports_only_what_the_first_job_needs_and_collects_again() -> None:
    got = _probe()
    assert _loaded(got["face"], NOT_IN_FACE) == []
    assert _loaded(got["roles"], NOT_AT_START) == []
    assert "duecast.worker.worker" in got["roles"]  # the probe did import the roles
    assert got["paused"] is True
    assert got["enabled"] is True  # start_process turned it back on
    assert isinstance(got["frozen"], int)
    assert got["frozen"] > 10_000  # the modules and settings, never walked again
    assert got["threshold"] == [collector.YOUNG_OBJECTS, 10, 10]  # a young generation for batches


def test_the_face_still_names_every_export_and_resolves_it() -> None:
    import duecast  # noqa: PLC0415

    assert set(duecast.__all__) <= set(dir(duecast))
    for name in duecast.__all__:
        assert getattr(duecast, name) is not None


def test_resume_without_pause_leaves_the_collector_alone() -> None:
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    collector.resume()  # a test or an embedding process: nothing paused, nothing frozen
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
    assert gc.get_threshold() == threshold


def test_a_command_that_ends_before_its_start_gets_the_collector_back_with_nothing_frozen() -> None:
    frozen = gc.get_freeze_count()
    collector.pause()
    try:
        assert not gc.isenabled()
    finally:
        collector.release()  # what `duecast worker --help` does in the process that ran it
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
