"""integrations/django/worker.py: around each task, Django's close_old_connections, skipped only where it
has nothing to look at. Run in a child process (Django's settings are the whole process's), on SQLite:
no server needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys, threading
import django
from django.conf import settings

settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": sys.argv[1],
                           "CONN_MAX_AGE": None if sys.argv[2] == "None" else int(sys.argv[2])}},
    INSTALLED_APPS=[],
)
django.setup()
from django.db import connection
from duecast.integrations.django.worker import _close_old_connections as around_a_task

seen = {}
def is_open():
    return connection.connection is not None

around_a_task()  # a thread that never opened one
connection.ensure_connection()  # a task's query
around_a_task()
seen["after_its_task"] = is_open()
around_a_task()  # nothing opened since: nothing to look at
connection.ensure_connection()  # the next task's query, after a pass that had nothing to do
around_a_task()
seen["after_the_next_task"] = is_open()
if is_open():
    connection.set_autocommit(False)  # left as no request may leave it: Django drops such a connection
    around_a_task()
    seen["after_autocommit_left_off"] = is_open()
opened_elsewhere = threading.Thread(target=connection.ensure_connection)  # its own thread's connection
opened_elsewhere.start()
opened_elsewhere.join()
connection.ensure_connection()
around_a_task()
seen["after_another_thread_opened_one"] = is_open()
print(json.dumps(seen))
"""


def _child(tmp_path: Path, max_age: str) -> dict[str, bool]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "db.sqlite3"), max_age],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_connection_a_task_opens_is_closed_after_it_even_after_a_pass_that_had_nothing_to_do(
    tmp_path: Path,
) -> None:
    # CONN_MAX_AGE = 0, Django's default: each task's connection is closed after it, as each request's.
    assert _child(tmp_path, "0") == {
        "after_its_task": False,
        "after_the_next_task": False,
        "after_another_thread_opened_one": False,
    }


def test_a_kept_connection_is_looked_at_before_every_task(tmp_path: Path) -> None:
    # CONN_MAX_AGE = None: kept across tasks, and still checked at each pass although none was opened.
    assert _child(tmp_path, "None") == {
        "after_its_task": True,
        "after_the_next_task": True,
        "after_autocommit_left_off": False,
        "after_another_thread_opened_one": True,
    }
