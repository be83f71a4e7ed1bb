"""The worker supervisor (worker/supervisor.py): when it restarts, how fast, what it exits with, and
that every exit of a child is handed back under the child's worker name. Real child processes (tiny
Python scripts), a recording handback: no servers."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from duecast.shared.storage.worker_registry import worker_name
from duecast.worker.handback import HandedBack
from duecast.worker.supervisor import (
    FREE_RESTARTS,
    RESTART_CAP_S,
    Supervisor,
    describe,
    exit_code,
    next_step,
    restart_delay_s,
)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fenced: list[bool] = []

    def after_exit(self, worker: str, why: str, *, fenced: bool = False) -> HandedBack:
        self.calls.append((worker, why))
        self.fenced.append(fenced)
        return HandedBack()


@pytest.mark.parametrize(
    ("code", "stopping", "step"),
    [
        (-9, False, "restart"),
        (69, False, "restart"),
        (75, False, "restart"),
        (70, False, "restart"),
        (3, False, "restart"),
        (0, False, "exit"),  # --drain finished
        (2, False, "exit"),  # settings or app: a new child would fail alike
        (-9, True, "exit"),
        (0, True, "exit"),
    ],
)
def test_next_step(code: int, stopping: bool, step: str) -> None:
    assert next_step(code, stopping=stopping) == step


def test_restarts_are_immediate_for_a_poison_jobs_deaths_then_back_off_to_the_cap() -> None:
    assert [restart_delay_s(n) for n in range(1, FREE_RESTARTS + 1)] == [0.0] * FREE_RESTARTS
    later = [restart_delay_s(FREE_RESTARTS + n) for n in range(1, 10)]
    assert later[:4] == [1.0, 2.0, 4.0, 8.0]
    assert later == sorted(later)
    assert max(later) == RESTART_CAP_S


def test_exit_codes_and_descriptions() -> None:
    assert exit_code(0) == 0
    assert exit_code(69) == 69
    assert exit_code(-int(signal.SIGKILL)) == 137
    assert describe(-int(signal.SIGKILL)) == "was killed by SIGKILL"
    assert describe(69) == "exited with code 69"


def _script(tmp_path: Path, body: str) -> list[str]:
    return [sys.executable, "-c", f"import os, signal, sys\nruns = {str(tmp_path / 'runs')!r}\n{body}"]


def test_each_exit_is_handed_back_under_the_childs_name_and_a_new_child_started(tmp_path: Path) -> None:
    # Killed twice (a poison job), then a clean exit (as a --drain child's): two restarts, one exit.
    body = (
        "open(runs, 'a').write(f'{os.getpid()}\\n')\n"
        "if len(open(runs).read().split()) < 3: os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    recorder = Recorder()
    assert Supervisor(_script(tmp_path, body), recorder).run() == 0  # type: ignore[arg-type]
    pids = [int(p) for p in (tmp_path / "runs").read_text().split()]
    assert [w for w, _ in recorder.calls] == [worker_name(p) for p in pids]
    assert [why for _, why in recorder.calls] == [
        "interrupted: its worker process was killed by SIGKILL before finishing it",
        "interrupted: its worker process was killed by SIGKILL before finishing it",
        "interrupted: its worker process exited with code 0 before finishing it",
    ]
    assert recorder.fenced == [False, False, False]


def test_a_child_that_fenced_itself_is_handed_back_fenced_and_its_jobs_excused(tmp_path: Path) -> None:
    # Exit 69 (EXIT_FENCED: it lost MySQL, shared.blame_policy excuses its runs), then a clean exit.
    body = "open(runs, 'a').write(f'{os.getpid()}\\n')\nif len(open(runs).read().split()) < 2: os._exit(69)\n"
    recorder = Recorder()
    assert Supervisor(_script(tmp_path, body), recorder).run() == 0  # type: ignore[arg-type]
    assert recorder.fenced == [True, False]
    assert recorder.calls[0][1] == "interrupted: its worker process exited with code 69 before finishing it"


def test_a_child_that_says_its_settings_are_wrong_is_not_restarted(tmp_path: Path) -> None:
    recorder = Recorder()
    body = "open(runs, 'a').write('x\\n'); sys.exit(2)"
    assert Supervisor(_script(tmp_path, body), recorder).run() == 2  # type: ignore[arg-type]
    assert len(recorder.calls) == 1


def test_a_stop_before_the_first_child_starts_none(tmp_path: Path) -> None:
    recorder = Recorder()
    supervisor = Supervisor(_script(tmp_path, "open(runs, 'a').write('x')"), recorder)  # type: ignore[arg-type]
    supervisor.forward(signal.SIGTERM)
    assert supervisor.run() == 0
    assert not (tmp_path / "runs").exists()
    assert recorder.calls == []
