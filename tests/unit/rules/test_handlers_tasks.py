"""Task routing of job rows, loading a registry from an app module, current_job and included registries."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from duecast import JobContext, current_job
from duecast.shared.acks import Ack, Row
from duecast.shared.api.app import AppError, load_registry
from duecast.shared.api.context import cancel_held, held_jobs
from duecast.shared.api.handlers import Registry
from duecast.shared.settings import JOBS_SOURCE
from tests.unit.rules.test_handlers_async import arun

# --- tasks ------------------------------------------------------------------------------------------


ENQUEUED = datetime(2026, 11, 25, 9, 30, 0, 123456)


def _job(task: str, payload: object, **columns: object) -> Row:
    """A job row as the worker reads it (shared/queries/jobs.py JOB_COLUMNS)."""
    row = {"id": 1, "dc_attempt": 1, "task": task, "payload": json.dumps(payload), "errors": 0}
    return {
        **row,
        "max_attempts": 20,
        "interruptions": 0,
        "queue": "default",
        "created_at": ENQUEUED,
        **columns,
    }


def test_task_routing_decodes_payload() -> None:
    reg = Registry()
    got: list[object] = []

    @reg.task("mail")
    def mail(payload: object) -> Ack | None:
        got.append(payload)
        return None

    @reg.task("later")
    def later(payload: object) -> Ack | None:
        return Ack.touch(60)

    payload = {"to": "a@example.com", "n": [1, 2], "ok": True, "none": None}
    out = reg.handler(JOBS_SOURCE).run([_job("mail", payload), _job("later", {}), _job("mail", "plain")])
    assert got == [payload, "plain"]
    assert out == [Ack.default(), Ack.touch(60), Ack.default()]


def test_unknown_task_is_dead_at_once_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    reg = Registry()
    reg.task("known")(lambda p: None)
    reg.task("other")(lambda p: None)

    out = reg.handler(JOBS_SOURCE).run([_job("unknown", {}), _job("known", {})])

    # Discarded (dead, no more attempts) with the reason kept as its error; not an exception.
    assert out[0] == Ack.discard("no task named 'unknown' is registered (registered: known, other)")
    assert out[1] == Ack.default()
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert record.exc_info is None
    assert "'unknown'" in record.getMessage()
    assert "known, other" in record.getMessage()
    assert record.__dict__["event"] == "worker.unknown_task"


def test_unknown_task_of_an_async_app_is_dead_at_once() -> None:
    reg = Registry()

    @reg.task("known")
    async def known(payload: object) -> None:
        return None

    handler = reg.handler(JOBS_SOURCE)
    assert handler.plan(_job("unknown", {}))[0] is False  # an unknown task takes the thread path
    assert arun(handler.run_one(_job("unknown", {}))) == Ack.discard(
        "no task named 'unknown' is registered (registered: known)"
    )


def test_bad_payload_json_is_that_rows_outcome() -> None:
    reg = Registry()
    reg.task("t")(lambda p: None)
    row = {**_job("t", None), "payload": "{not json"}
    out = reg.handler(JOBS_SOURCE).run([row, _job("t", 1)])
    assert isinstance(out[0], ValueError)
    assert out[1] == Ack.default()


def test_task_exception_is_that_rows_outcome() -> None:
    reg = Registry()

    @reg.task("t")
    def t(payload: object) -> None:
        raise RuntimeError(f"failed {payload}")

    out = reg.handler(JOBS_SOURCE).run([_job("t", 7)])
    assert isinstance(out[0], RuntimeError)
    assert str(out[0]) == "failed 7"


# --- load_registry ----------------------------------------------------------------------------------

APP = """
from duecast.shared.api.handlers import Registry

handlers = Registry()
handlers.row("users")(lambda row: None)

other = Registry()
other.task("t")(lambda payload: None)

not_a_registry = 42
"""


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throwaway importable module holding registries; removed from sys.modules afterwards."""
    name = f"duecast_unit_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_load_registry_default_attribute(app_module: str) -> None:
    reg = load_registry(app_module)
    assert isinstance(reg, Registry)
    assert reg.sources == ["users"]


def test_load_registry_named_attribute(app_module: str) -> None:
    assert load_registry(f"{app_module}:other").sources == [JOBS_SOURCE]


@pytest.mark.parametrize("attr", ["not_a_registry", "missing"])
def test_load_registry_wrong_type(app_module: str, attr: str) -> None:
    with pytest.raises(AppError, match=f"expected a duecast Registry at {app_module}:{attr}"):
        load_registry(f"{app_module}:{attr}")


@pytest.mark.parametrize("name", ["tasks", "anything"])
def test_load_registry_finds_the_modules_one_registry_whatever_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    module = f"one_registry_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        f"from duecast import Registry\n{name} = Registry()\n"
        f"{name}.task('t')(lambda p: None)\nalias = {name}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_registry(module).task_names == {"t"}


def test_load_registry_names_the_registries_it_found(app_module: str, tmp_path: Path) -> None:
    with pytest.raises(AppError, match=r"Registries in .*: handlers, other"):
        load_registry(f"{app_module}:handler")
    several = f"several_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{several}.py").write_text("from duecast import Registry\nb = Registry()\na = Registry()\n")
    with pytest.raises(AppError, match=rf"several Registries \(a, b\); name one: --app {several}:a"):
        load_registry(several)
    none = f"none_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{none}.py").write_text("x = 1\n")
    with pytest.raises(AppError, match="holds no duecast Registry"):
        load_registry(none)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = (\n", r"has a syntax error at .*broken_\w+\.py:1: '\(' was never closed"),
        ("import os\nraise RuntimeError('no key')\n", r"raised RuntimeError: no key at .*broken_\w+\.py:2"),
        ("import no_such_dependency_xyz\n", r"cannot import the app module .*no_such_dependency_xyz"),
    ],
)
def test_an_app_that_fails_to_import_is_one_app_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: str
) -> None:
    module = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AppError, match=expected) as raised:
        load_registry(module)
    assert "\n" not in str(raised.value)
    assert repr(module) in str(raised.value)


def test_load_registry_missing_module() -> None:
    with pytest.raises(AppError, match="cannot import the app module"):
        load_registry(f"no_such_module_{uuid.uuid4().hex}")


def test_load_registry_finds_modules_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"cwd_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("from duecast import Registry\nhandlers = Registry()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_registry(name).sources == []


def test_a_task_sees_its_own_job_through_current_job() -> None:
    reg = Registry()
    seen: list[JobContext] = []

    @reg.task("mail")
    def mail(payload: object) -> None:  # a plain fn(payload): no new parameter needed
        seen.append(current_job())

    @reg.task("ledger", transactional=True)
    def ledger(payload: object, cursor: object) -> None:
        seen.append(current_job())

    rows = [
        _job("mail", 1, id=41, dc_attempt=3, errors=2, queue="mail"),
        # the packed read gives created_at as text
        _job("mail", 2, id=42, created_at="2026-11-25 09:30:00.123456"),
    ]
    assert reg.handler(JOBS_SOURCE).run(rows) == [Ack.default(), Ack.default()]
    (deferred,) = reg.handler(JOBS_SOURCE).run([_job("ledger", 3, id=43)])
    assert isinstance(deferred, Ack)
    assert deferred.work is not None
    deferred.work(object())  # the worker runs it later, in its ack transaction

    assert seen == [
        JobContext(41, 3, "mail", "mail", ENQUEUED, errors=2, max_attempts=20),
        JobContext(42, 1, "default", "mail", ENQUEUED, errors=0, max_attempts=20),
        JobContext(43, 1, "default", "ledger", ENQUEUED, errors=0, max_attempts=20),
    ]
    with pytest.raises(LookupError, match="only known inside a task"):
        current_job()  # outside a task


def test_a_plain_task_that_never_asks_for_its_job_is_still_held_for_a_cancel() -> None:
    """The common path builds no JobContext unless current_job() asks (shared/api/context.py
    call_row_as); the job is held by its id all the same, so a cancel reaches it, and asking twice
    gives the one context."""
    reg = Registry()
    held: list[list[int]] = []
    told: list[int] = []
    asked: list[tuple[JobContext, JobContext, bool]] = []

    @reg.task("quiet")
    def quiet(payload: object) -> None:
        held.append(held_jobs())
        told.append(cancel_held([7]))  # what the worker's cancel watch does

    @reg.task("asks")
    def asks(payload: object) -> None:
        asked.append((current_job(), current_job(), current_job().cancelled))

    run = reg.handler(JOBS_SOURCE).run
    assert run([_job("quiet", None, id=7)]) == [Ack.default()]
    assert held == [[7]]
    assert told == [1]
    assert held_jobs() == []  # left when the call ended
    assert run([_job("asks", None, id=8, dc_attempt=2)]) == [Ack.default()]
    ((first, second, cancelled),) = asked
    assert first is second
    assert first == JobContext(8, 2, "default", "asks", ENQUEUED, errors=0, max_attempts=20)
    assert not cancelled


def test_one_registry_can_include_another_and_conflicts_are_errors() -> None:
    a, b = Registry(), Registry()
    a.row("users", columns=["status"])(lambda row: None)
    a.task("mail")(lambda p: None)
    a.schedule("nightly", "mail", cron="0 3 * * *")
    b.batch("orders")(lambda rows: None)
    b.task("bill", transactional=True)(lambda p, cursor: None)

    both = Registry()
    both.include(a)
    both.include(b)

    assert both.sources == ["jobs", "orders", "users"]
    assert both.task_names == {"mail", "bill"}
    assert both.handler("users").columns == ("status",)
    assert both.handler("orders").batch
    assert [s.name for s in both.schedules] == ["nightly"]
    with pytest.raises(ValueError, match="source 'users' already has a handler"):
        both.include(a)
    clash = Registry()
    clash.task("bill")(lambda p: None)
    with pytest.raises(ValueError, match="task 'bill' is registered twice"):
        both.include(clash)
