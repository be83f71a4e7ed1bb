"""The worker supervisor (worker/supervisor.py): when it restarts, how fast, what it exits with, that
every exit of a child is handed back under the child's worker name, and that --processes keeps a child
in each slot. Real child processes (tiny Python scripts, or this process forked), a recording
handback: no servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from duecast.shared.process.bell import Bell
from duecast.shared.process.failures import StartupError
from duecast.shared.storage.worker_registry import worker_name
from duecast.worker.broadcast import slot_member
from duecast.worker.handback import HandedBack
from duecast.worker.supervisor import (
    FREE_RESTARTS,
    RESTART_CAP_S,
    Spawn,
    Supervisor,
    describe,
    exit_code,
    forked,
    next_step,
    restart_delay_s,
)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fenced: list[bool] = []
        self.closed = 0

    def after_exit(self, worker: str, why: str, *, fenced: bool = False) -> HandedBack:
        self.calls.append((worker, why))
        self.fenced.append(fenced)
        return HandedBack()

    def close(self) -> None:
        self.closed += 1


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


def _script(tmp_path: Path, body: str) -> Spawn:
    """A Spawn that runs `body` as a new Python process; `slot` is its slot, `runs` a file to note in."""

    def spawn(slot: int) -> int:
        code = f"import os, signal, sys\nslot = {slot}\nruns = {str(tmp_path / 'runs')!r}\n{body}"
        return os.posix_spawn(sys.executable, [sys.executable, "-c", code], os.environ)

    return spawn


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
    assert (tmp_path / "runs").read_text() == "x\n"  # one child, not started again
    assert recorder.calls == []  # it refused its own start: it held nothing, there is no hand-back


def test_a_stop_before_the_first_child_starts_none(tmp_path: Path) -> None:
    recorder = Recorder()
    supervisor = Supervisor(_script(tmp_path, "open(runs, 'a').write('x')"), recorder)  # type: ignore[arg-type]
    supervisor.forward(signal.SIGTERM)
    assert supervisor.run() == 0
    assert not (tmp_path / "runs").exists()
    assert recorder.calls == []


def _runs(tmp_path: Path) -> list[tuple[int, int]]:
    """(slot, pid) per child started, in the order they noted themselves."""
    lines = (tmp_path / "runs").read_text().split("\n")
    return [(int(a), int(b)) for a, b in (line.split() for line in lines if line)]


NOTE = "open(runs, 'a').write(f'{slot} {os.getpid()}\\n')\n"


def test_processes_keep_a_child_in_each_slot_and_restart_only_the_slot_that_died(tmp_path: Path) -> None:
    # Each slot's first child is killed (a poison job), its second ends clean (a --drain's end).
    body = NOTE + (
        "mine = [l for l in open(runs).read().split('\\n') if l.startswith(f'{slot} ')]\n"
        "if len(mine) < 2: os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    recorder = Recorder()
    assert Supervisor(_script(tmp_path, body), recorder, processes=3).run() == 0  # type: ignore[arg-type]
    runs = _runs(tmp_path)
    assert sorted(slot for slot, _ in runs) == [0, 0, 1, 1, 2, 2]
    assert sorted(w for w, _ in recorder.calls) == sorted(worker_name(pid) for _, pid in runs)
    killed = [why for _, why in recorder.calls if "SIGKILL" in why]
    assert len(killed) == 3
    assert recorder.closed == 6  # no connection of the handback's is left open across a fork


def test_a_child_that_says_its_settings_are_wrong_stops_the_other_processes(tmp_path: Path) -> None:
    # Slot 0 exits 2 at once; the others wait to be told. Nobody is restarted; the parent exits 2.
    body = NOTE + "if slot == 0: sys.exit(2)\nsignal.pause()\n"
    recorder = Recorder()
    assert Supervisor(_script(tmp_path, body), recorder, processes=3).run() == 2  # type: ignore[arg-type]
    slots = [slot for slot, _ in _runs(tmp_path)]  # a stopped child may end before it notes itself
    assert 0 in slots
    assert len(slots) == len(set(slots))  # none started again
    # The two stopped ones are handed back; the one that refused its start held nothing.
    assert [why for _, why in recorder.calls] == [
        "interrupted: its worker process was killed by SIGTERM before finishing it"
    ] * 2


def test_sigterm_is_forwarded_to_every_child_and_the_parent_waits_for_their_drains(tmp_path: Path) -> None:
    # Each child notes its start, then on SIGTERM notes that it drained and exits 0.
    body = (
        "signal.signal(signal.SIGTERM, lambda *_: (open(runs + '.term', 'a').write('x'), os._exit(0)))\n"
        + NOTE
        + "while True: signal.pause()\n"
    )
    recorder = Recorder()
    supervisor = Supervisor(_script(tmp_path, body), recorder, processes=2)  # type: ignore[arg-type]

    def stop_once_both_run() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (tmp_path / "runs").exists() and len(_runs(tmp_path)) == 2:
                supervisor.forward(signal.SIGTERM)
                return
            time.sleep(0.01)

    stopper = threading.Thread(target=stop_once_both_run)
    stopper.start()
    assert supervisor.run() == 0
    stopper.join()
    assert (tmp_path / "runs.term").read_text() == "xx"
    assert len(recorder.calls) == 2


def test_forked_children_run_the_slot_in_a_new_process_and_exit_with_its_code(tmp_path: Path) -> None:
    def run_slot(slot: int) -> int:
        with open(tmp_path / "runs", "a") as f:
            f.write(f"{slot} {os.getpid()}\n")
        return 0

    recorder = Recorder()
    assert Supervisor(forked(run_slot), recorder, processes=2).run() == 0  # type: ignore[arg-type]
    runs = _runs(tmp_path)
    assert sorted(slot for slot, _ in runs) == [0, 1]
    assert os.getpid() not in {pid for _, pid in runs}
    assert [why for _, why in recorder.calls] == [
        "interrupted: its worker process exited with code 0 before finishing it"
    ] * 2


def test_a_forked_childs_startup_error_is_its_one_line_and_the_parents_exit_code(
    capfd: pytest.CaptureFixture[str],
) -> None:
    def run_slot(slot: int) -> int:
        raise StartupError("no app given; pass --app package.module")

    recorder = Recorder()
    assert Supervisor(forked(run_slot), recorder).run() == 2  # type: ignore[arg-type]
    err = capfd.readouterr().err
    assert err.strip().splitlines() == ["duecast worker: no app given; pass --app package.module"]
    assert recorder.calls == []  # a child that refused its start held nothing


def test_each_process_is_a_broadcast_member_of_its_own_named_by_its_slot() -> None:
    assert slot_member("host-a", 0) == "host-a-0"
    assert slot_member("host-a", 11) == "host-a-11"
    long = "h" * 100  # a member name may have 100 characters: the base is cut, the slot kept
    assert slot_member(long, 3) == "h" * 98 + "-3"
    assert len({slot_member(long, s) for s in range(12)}) == 12


def test_a_fork_the_system_refuses_is_tried_again_and_the_other_slots_start(tmp_path: Path) -> None:
    script = _script(tmp_path, NOTE)
    refused: list[int] = []

    def spawn(slot: int) -> int:
        if slot == 1 and not refused:
            refused.append(slot)
            raise BlockingIOError(11, "Resource temporarily unavailable")  # fork's EAGAIN
        return script(slot)

    recorder = Recorder()
    assert Supervisor(spawn, recorder, processes=2).run() == 0  # type: ignore[arg-type]
    assert refused == [1]
    assert sorted(slot for slot, _ in _runs(tmp_path)) == [0, 1]


# A signal's handler runs in the main thread between two of its bytecodes, wherever it is. The loop
# was woken by a threading.Event set from the SIGCHLD handler: a handler that came while the loop held
# the Event's lock (in its own wait() or clear()) waited on that lock forever; three children that
# refused their start at once hung a `--processes 3` parent so in one CI run. The same loop with an
# Event under this pounding dies or hangs in well under its second (RecursionError, no line printed).
BELL_UNDER_SIGNALS = """
import signal, time
from duecast.shared.process.bell import Bell
bell = Bell()
signal.signal(signal.SIGALRM, lambda _signum, _frame: bell.ring())
signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
start, loops = time.monotonic(), 0
while time.monotonic() - start < 1.0:
    bell.wait(0.0005)
    bell.clear()
    loops += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print("loops", loops)
"""


def test_the_loops_bell_rung_by_a_signal_handler_at_any_moment_never_hangs_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BELL_UNDER_SIGNALS], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    word, loops = done.stdout.split()
    assert word == "loops"
    assert int(loops) > 100  # it ran, rung thousands of times a second, to its end


def test_a_rung_bell_wakes_a_wait_until_cleared_and_a_closed_one_ignores_a_late_ring() -> None:
    bell = Bell()
    bell.ring()
    bell.ring()  # rung twice before the loop looks: one wake-up is enough
    started = time.monotonic()
    bell.wait(5.0)
    assert time.monotonic() - started < 1.0
    bell.clear()
    started = time.monotonic()
    bell.wait(0.05)  # cleared: the wait runs to its timeout
    assert time.monotonic() - started >= 0.04
    bell.close()
    bell.ring()  # a handler after the loop ended: nothing written to a closed (or reused) descriptor
