"""`duecast worker --supervise` / `--processes N`: a small parent that runs N worker processes, forked
from it once its imports are done, and the moment one exits hands back what it held (worker/handback.py)
and forks its successor.

A job that kills its worker (a poison job, the OOM killer, a segfault in a C extension) then costs
about a restart, not a lease (15 s) or worker.dead_after_s (15 s). Only an exit that waitpid reports
counts: a child that is stopped (SIGSTOP) or slow is never touched, its leases run as ever. The parent
never imports the user's app (each child does, after the fork), opens no connection before it forks,
starts no thread, serves no health port, and forwards SIGTERM/SIGINT to its children, whose drains it
waits for. If the parent itself is lost, the children get SIGTERM (Linux) and leases cover the rest.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Literal

from ..shared.process.bell import Bell
from ..shared.process.failures import EXIT_BUG, EXIT_CONFIG, run_command
from ..shared.settings import Settings
from ..shared.storage.leased.keeper import EXIT_FENCED
from ..shared.storage.worker_registry import worker_name
from .handback import Handback

log = logging.getLogger("duecast.supervisor")

QUICK_EXIT_S = 60.0  # a child that ran less than this before it exited counts towards the backoff
FREE_RESTARTS = 5  # quick exits in a row restarted at once (a poison job dies max_interruptions times)
RESTART_CAP_S = 30.0
MAX_PROCESSES = 256
PR_SET_PDEATHSIG = 1  # linux/prctl.h
FORWARDED = (signal.SIGTERM, signal.SIGINT)
# Held back across a fork: the child must not run the parent's handlers before it has its own.
HELD_AT_FORK = {*FORWARDED, signal.SIGCHLD}

Next = Literal["restart", "exit"]
# Starts the child of slot i (0 <= i < processes) and returns its pid.
Spawn = Callable[[int], int]


def next_step(code: int, *, stopping: bool) -> Next:
    """After a child exited with `code` (negative: killed by that signal): its slot ends when asked to
    stop, when the child ended by itself (0: --drain finished) or said its settings or app are wrong
    (2: a new child would fail the same way); restart after anything else (a kill, 69, 70, 75, 3)."""
    if stopping or code in (0, EXIT_CONFIG):
        return "exit"
    return "restart"


def restart_delay_s(quick_exits: int) -> float:
    """How long to wait before the next child, after `quick_exits` children in a row (this one
    included) that exited within QUICK_EXIT_S of their start: none for the first FREE_RESTARTS, then
    1, 2, 4... seconds, capped at RESTART_CAP_S, so a child that cannot start does not spin."""
    if quick_exits <= FREE_RESTARTS:
        return 0.0
    return float(min(RESTART_CAP_S, 2.0 ** (quick_exits - FREE_RESTARTS - 1)))


def exit_code(code: int) -> int:
    """The parent's exit code for a child's: a child killed by signal N gives 128 + N, as a shell says."""
    return 128 - code if code < 0 else code


def describe(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _end_with_parent(parent: int) -> Callable[[], None]:
    """What a new child runs first: the kernel is to send it SIGTERM when its parent dies (Linux), so a
    lost supervisor's worker drains instead of running on unwatched. Does nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return lambda: None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the call: nothing would tell us
            os.kill(os.getpid(), signal.SIGTERM)

    return setup


def forked(run_slot: Callable[[int], int]) -> Spawn:
    """A Spawn that forks this process and runs `run_slot(i)` in the child, which never returns from
    the fork: it exits with run_slot's code (a StartupError as its one line and code, as a worker's
    command does). The child shares the parent's imported modules (copy-on-write; the collector has
    frozen them) instead of importing them again: a second worker costs a fork, not a start-up."""

    def spawn(slot: int) -> int:
        end_with_parent = _end_with_parent(os.getpid())
        for stream in (sys.stdout, sys.stderr):  # or the child would write the parent's buffer again
            stream.flush()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_AT_FORK)
        pid = os.fork()
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            return pid
        code = EXIT_BUG
        try:
            for sig in HELD_AT_FORK:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            end_with_parent()
            code = run_command("duecast worker", lambda _argv: run_slot(slot), [])
        except SystemExit as exc:  # --help cannot get here; a bare sys.exit() in the app's import can
            code = exc.code if isinstance(exc.code, int) else EXIT_CONFIG
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)  # never back into the parent's stack, its atexit handlers or finalizers

    return spawn


@dataclass(frozen=True)
class Child:
    slot: int
    started: float


class Supervisor:
    """Keeps `processes` children running (each slot's again after each exit) until stopped."""

    def __init__(
        self,
        spawn: Spawn,
        handback: Handback,
        *,
        processes: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spawn = spawn
        self.handback = handback
        self.processes = processes
        self.clock = clock
        self.stopping = False  # a plain flag: set from a signal handler, which must take no lock
        self.wake = Bell()  # rung by SIGCHLD and by a stop: the loop looks at its children
        self.children: dict[int, Child] = {}  # pid -> its slot
        self.quick_exits = 0
        self.not_before = 0.0  # no child starts before this (the restart backoff)
        self.last = 0  # the last child's exit code
        self.decided: int | None = None  # a child's EXIT_CONFIG: the code the parent leaves with

    def forward(self, signum: int, _frame: FrameType | None = None) -> None:
        """SIGTERM/SIGINT: ask every child to finish its batch and stop; the parent exits after them."""
        if not self.stopping:
            log.info(
                "received %s; stopping the worker",
                signal.Signals(signum).name,
                extra={"event": "process.stopping"},
            )
        self._stop_children(signum)

    def _stop_children(self, signum: int) -> None:
        self.stopping = True
        self.wake.ring()
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def run(self) -> int:
        """Run the children until every slot has ended; returns the exit code to leave with: the code
        of a child that said its settings are wrong, else the last child's."""
        previous = signal.signal(signal.SIGCHLD, lambda _signum, _frame: self.wake.ring())
        try:
            return self._loop()
        finally:
            signal.signal(signal.SIGCHLD, previous)
            self.wake.close()

    def _loop(self) -> int:
        waiting = set(range(self.processes))  # slots to start a child in
        while True:
            if waiting and not self.stopping and self.clock() >= self.not_before:
                waiting = {slot for slot in sorted(waiting) if not self._started(slot)}  # refused: wait on
            if not self.children and (self.stopping or not waiting):
                return exit_code(self.last if self.decided is None else self.decided)
            starting = waiting and not self.stopping
            self.wake.wait(max(0.0, self.not_before - self.clock()) if starting else 1.0)
            self.wake.clear()  # before the reaping: an exit after it sets it again
            for pid, code in self._reap():
                child = self.children.pop(pid)
                if self._exited(pid, child, code) == "restart":
                    waiting.add(child.slot)

    def _exited(self, pid: int, child: Child, code: int) -> Next:
        """After a child's exit: hand back what it held and say whether its slot gets a new child."""
        self.last = self._handed_back(pid, child, code)
        if code == EXIT_CONFIG and self.decided is None:
            self.decided = code
            if self.children and not self.stopping:
                log.warning("a worker process said its settings or app are wrong; stopping the others")
            self._stop_children(signal.SIGTERM)  # each would fail alike
        step = next_step(code, stopping=self.stopping)
        if step == "restart":
            delay_s = restart_delay_s(self.quick_exits)
            if delay_s:
                log.warning(
                    "%d worker processes in a row exited early; next in %.0fs", self.quick_exits, delay_s
                )
            self.not_before = max(self.not_before, self.clock() + delay_s)
        return step

    def _started(self, slot: int) -> bool:
        """Start the child of `slot`; False if the system would not fork (out of memory or processes):
        then the slot is tried again in a second, the others run on."""
        try:
            self._start(slot)
        except OSError as exc:
            log.warning("could not start a worker process (%s); trying again in 1s", exc)
            self.not_before = self.clock() + 1.0
            return False
        return True

    def _start(self, slot: int) -> None:
        pid = self.spawn(slot)
        self.children[pid] = Child(slot, self.clock())
        if self.stopping:  # a signal came between the loop's check and the child's start
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _reap(self) -> list[tuple[int, int]]:
        """(pid, code) of each child that has exited; without WUNTRACED a stopped child has not."""
        out = []
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its code is lost
                done, status = pid, 0
            if done:
                out.append((pid, os.waitstatus_to_exitcode(status)))
        return out

    def _handed_back(self, pid: int, child: Child, code: int) -> int:
        """Hand back what the exited child held and log its exit; returns its code."""
        lived_s = self.clock() - child.started
        self.quick_exits = self.quick_exits + 1 if lived_s < QUICK_EXIT_S else 0
        worker = worker_name(pid)
        if code == EXIT_CONFIG:
            # Its own start-up refused (settings, app, schema: its one line said which) before its
            # first pop: nothing to hand back, and a hand-back would only repeat the fault (a MySQL
            # database that does not exist) as more lines. A registry row it made goes as a silent one's.
            log.warning(
                "worker process %s %s after %.1fs: it did not start",
                worker,
                describe(code),
                lived_s,
                extra={"event": "supervisor.child_exited", "worker": worker, "code": code},
            )
            return code
        why = f"interrupted: its worker process {describe(code)} before finishing it"
        try:
            # A worker that fenced itself lost MySQL (a restart, a read lock): not its jobs' fault.
            back = self.handback.after_exit(worker, why, fenced=code == EXIT_FENCED)
        except Exception:  # a bug in the handback must not stop the restarts: leases cover it
            log.exception("handing back what worker %s held failed", worker)
            return code
        finally:
            self.handback.close()  # the next child is forked from this process: no socket of ours in it
        log.log(
            logging.INFO if code == 0 else logging.WARNING,
            "worker process %s %s after %.1fs; handed back %d started and %d popped rows",
            worker,
            describe(code),
            lived_s,
            back.interrupted + back.requeued,
            back.held,
            extra={
                "event": "supervisor.child_exited",
                "worker": worker,
                "code": code,
                "interrupted": back.interrupted,
                "requeued": back.requeued,
                "held": back.held,
                "slot": child.slot,
            },
        )
        return code


def supervise(settings: Settings, run_slot: Callable[[int], int], *, processes: int = 1) -> int:
    """`duecast worker --supervise` / `--processes N`: N children each running `run_slot(i)`."""
    supervisor = Supervisor(forked(run_slot), Handback(settings), processes=processes)
    signal.signal(signal.SIGTERM, supervisor.forward)
    signal.signal(signal.SIGINT, supervisor.forward)
    log.info(
        "supervising %d worker process%s",
        processes,
        "" if processes == 1 else "es",
        extra={"event": "supervisor.started", "processes": processes},
    )
    return supervisor.run()
