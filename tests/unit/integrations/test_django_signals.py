"""integrations/django/worker.py: Django's task_started / task_finished are sent whenever anything could
see them (a receiver of the user's, or django-tasks' log receivers with their logger writing), and a
task's TaskResult is built only then or for a TaskContext. Run in a child process (Django's settings are
the whole process's); no server needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

TASKS = """
from django_tasks import task

@task()
def plain(a, b=0):
    return a + b

@task(takes_context=True)
def with_context(context, a):
    r = context.task_result
    return [r.status, r.args, r.started_at is not None]

@task()
def fails():
    raise ValueError("boom")

@task()
async def doubled(a):
    return a * 2
"""

CHILD = """
import json, logging, sys
from datetime import datetime
import django
from django.conf import settings

sys.path.insert(0, sys.argv[1])
settings.configure(
    INSTALLED_APPS=["django_tasks"], DATABASES={}, USE_TZ=True,
    TASKS={"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}},
)
django.setup()
from duecast.integrations.django import worker
from duecast.integrations.django.api import task_finished, task_started
from duecast.shared.api.context import JobContext, running

built = [0]
real = worker.TaskResult
def counting(*args, **kwargs):
    built[0] += 1
    return real(*args, **kwargs)
worker.TaskResult = counting

records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.getMessage()])
logging.getLogger("django_tasks").addHandler(Keep())

def run(path, *args, **kwargs):
    job = JobContext(id=7, attempt=2, queue="default", task="django", enqueued_at=datetime(2026, 1, 1),
                     errors=0, max_attempts=3)
    with running(job):
        try:
            return worker.run_plain({"task": path, "args": list(args), "kwargs": kwargs})
        except ValueError as exc:
            return "raised " + str(exc)

out = {}
case = sys.argv[2]
if case == "user_receiver":
    seen = []
    def receiver(sender, task_result, **kw):
        seen.append([task_result.status, task_result.args, task_result.kwargs, task_result.id,
                     task_result.finished_at is not None, sender.__name__])
    task_started.connect(receiver)
    task_finished.connect(receiver)
    out["value"] = run("tasks.plain", 1, b=2)
    out["failed"] = run("tasks.fails")
    out["seen"] = seen
if case == "logger_info":
    logging.getLogger("django_tasks").setLevel(logging.INFO)
    out["value"] = run("tasks.plain", 1, b=2)
if case == "quiet":
    out["value"] = run("tasks.plain", 1, b=2)
    out["context"] = run("tasks.with_context", 5)
    out["failed"] = run("tasks.fails")
    out["async_as_plain"] = run("tasks.doubled", 4)  # enqueued before its code became async def
out["built"] = built[0]
out["records"] = records
print(json.dumps(out))
"""


def _child(tmp_path: Path, case: str) -> dict[str, Any]:
    (tmp_path / "tasks.py").write_text(TASKS)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), case],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_users_receiver_sees_every_start_and_finish_with_the_tasks_result(tmp_path: Path) -> None:
    out = _child(tmp_path, "user_receiver")
    assert out["value"] == 3
    assert out["failed"] == "raised boom"
    assert out["seen"] == [
        ["RUNNING", [1], {"b": 2}, "7", False, "DummyBackend"],
        ["SUCCESSFUL", [1], {"b": 2}, "7", True, "DummyBackend"],
        ["RUNNING", [], {}, "7", False, "DummyBackend"],
        ["FAILED", [], {}, "7", True, "DummyBackend"],
    ]


def test_django_tasks_own_log_lines_are_written_when_its_logger_is_at_info(tmp_path: Path) -> None:
    out = _child(tmp_path, "logger_info")
    assert out["value"] == 3
    assert [level for level, _ in out["records"]] == ["INFO", "INFO"]
    assert "state=RUNNING" in out["records"][0][1]
    assert "state=SUCCESSFUL" in out["records"][1][1]


def test_with_nothing_to_see_no_result_is_built_but_a_context_and_a_failure_still_get_theirs(
    tmp_path: Path,
) -> None:
    out = _child(tmp_path, "quiet")
    assert out["value"] == 3
    # A TaskContext gets a whole TaskResult: RUNNING, its args, a start time.
    assert out["context"][0] == "RUNNING"
    assert out["context"][1] == [5]
    assert out["context"][2] is True
    # django-tasks logs a failure at ERROR (its logger writes that by default): it is sent.
    assert [level for level, _ in out["records"]] == ["ERROR"]
    assert "state=FAILED" in out["records"][0][1]
    assert out["built"] == 2  # the context's and the failure's; the plain success built none
    # A plain job whose function is now `async def` still runs, through Task.call (async_to_sync):
    # only a plain function without a context is called directly.
    assert out["async_as_plain"] == 8
