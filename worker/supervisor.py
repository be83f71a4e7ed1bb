"""`duecast worker --supervise`: a small parent process that runs the worker as its child and, the
moment the child exits, hands back what it held (worker/handback.py) and starts a new one.

A job that kills its worker (a poison job, the OOM killer, a segfault in a C extension) then costs
about a restart, not a lease (15 s) or worker.dead_after_s (15 s). Only an exit that waitpid reports
counts: a child that is stopped (SIGSTOP) or slow is never touched, its leases run as ever. The parent
never imports the user's app, serves no health port and forwards SIGTERM/SIGINT to the child, whose
drain it waits for. If the parent itself is lost, the child gets SIGTERM (Linux) and leases cover
the rest, as without a supervisor.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Literal

from ..shared.process.failures import EXIT_CONFIG
from ..shared.settings import Settings
from ..shared.storage.leased.keeper import EXIT_FENCED
from ..shared.storage.worker_registry import worker_name
from .handback import Handback

log = logging.getLogger("duecast.supervisor")

QUICK_EXIT_S = 60.0  # a child that ran less than this before it exited counts towards the backoff
FREE_RESTARTS = 5  # quick exits in a row restarted at once (a poison job dies max_interruptions times)
RESTART_CAP_S = 30.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h

Next = Literal["restart", "exit"]


def next_step(code: int, *, stopping: bool) -> Next:
    """After the child exited with `code` (negative: killed by that signal): exit when asked to stop,
    when the child ended by itself (0: --drain finished) or said its settings or app are wrong (2:
    a new child would fail the same way); restart after anything else (a kill, 69, 70, 75, 3)."""
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


def _end_with_parent(parent: int) -> Callable[[], None] | None:
    """A preexec_fn that has the kernel send the child SIGTERM when its parent dies (Linux), so a
    lost supervisor's worker drains instead of running on unwatched. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the call: nothing would tell us
            os.kill(os.getpid(), signal.SIGTERM)

    return setup


class Supervisor:
    """Runs `command` (the worker) as a child process, again after each exit, until stopped."""

    def __init__(
        self,
        command: Sequence[str],
        handback: Handback,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = list(command)
        self.handback = handback
        self.clock = clock
        self.stop = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.quick_exits = 0

    def forward(self, signum: int, _frame: FrameType | None = None) -> None:
        """SIGTERM/SIGINT: ask the child to finish its batch and stop; the parent exits after it."""
        if not self.stop.is_set():
            log.info(
                "received %s; stopping the worker",
                signal.Signals(signum).name,
                extra={"event": "process.stopping"},
            )
        self.stop.set()
        child = self.child
        if child is not None and child.returncode is None:
            child.send_signal(signum)

    def run(self) -> int:
        """Start a child, wait for it to end, hand back what it held, and start the next; returns
        the exit code to leave with (the last child's)."""
        while not self.stop.is_set():
            code = self.run_child()
            if next_step(code, stopping=self.stop.is_set()) == "exit":
                return exit_code(code)
            delay_s = restart_delay_s(self.quick_exits)
            if delay_s:
                log.warning(
                    "%d worker processes in a row exited early; next in %.0fs", self.quick_exits, delay_s
                )
            self.stop.wait(delay_s)
        return 0

    def run_child(self) -> int:
        """One child, from its start to its exit and handback; its return code."""
        started = self.clock()
        child = subprocess.Popen(self.command, preexec_fn=_end_with_parent(os.getpid()))  # noqa: PLW1509
        self.child = child
        if self.stop.is_set():  # a signal came between the loop's check and the child's start
            child.send_signal(signal.SIGTERM)
        code = child.wait()  # waitpid without WUNTRACED: a stopped child is not an exited one
        lived_s = self.clock() - started
        self.quick_exits = self.quick_exits + 1 if lived_s < QUICK_EXIT_S else 0
        worker = worker_name(child.pid)
        why = f"interrupted: its worker process {describe(code)} before finishing it"
        try:
            # A worker that fenced itself lost MySQL (a restart, a read lock): not its jobs' fault.
            back = self.handback.after_exit(worker, why, fenced=code == EXIT_FENCED)
        except Exception:  # a bug in the handback must not stop the restarts: leases cover it
            log.exception("handing back what worker %s held failed", worker)
            return code
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
            },
        )
        return code


def supervise(settings: Settings, worker_args: Sequence[str]) -> int:
    """`duecast worker --supervise ...`: the worker's own arguments, minus --supervise, go to each child."""
    supervisor = Supervisor([sys.executable, "-m", "duecast.worker", *worker_args], Handback(settings))
    signal.signal(signal.SIGTERM, supervisor.forward)
    signal.signal(signal.SIGINT, supervisor.forward)
    log.info("supervising worker processes: %s", " ".join(worker_args), extra={"event": "supervisor.started"})
    return supervisor.run()
