"""Real duecast processes for the fault tier: start, signal, reap, and show their logs on failure.

Not duecast.cli.demo.fleet: each process here needs its own environment (gates, markers, delays), SIGKILL,
and an alarm when a process the test did not stop exits by itself. Nothing here sleeps in place of
an assertion: `wait_for` polls a predicate every 50 ms and fails with a message on timeout.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# The repo root, the children's cwd: `-m duecast.worker --app tests.faults.app` imports from it.
ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.05
# The last line of a traceback, e.g. "pymysql.err.ProgrammingError: (1064, ...)".
# An exception's class name: a traceback's last line, or a transient failure's one-line cause at the
# end of its log line (`... retrying in 0.42s: ConnectionError: Error 111 ...`, shared/process/failures.py).
_EXCEPTION_LINE = re.compile(
    r"(?:^|: )([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::|$)", re.MULTILINE
)
TAIL_LINES = 40


def wait_for(
    pred: Callable[[], object],
    timeout: float,
    what: str,
    check: Callable[[], None] | None = None,
) -> None:
    """Poll `pred` every 50 ms until it is true; `check` runs each round and may fail early."""
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        if pred():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_S)


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a log, without APScheduler's line per sweeper run (every 0.2 s here)."""
    if not path.exists():
        return "(no output)"
    text = [t for t in path.read_text(errors="replace").splitlines() if " INFO apscheduler." not in t]
    return "\n".join(text[-lines:]) or "(empty)"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    may_exit: bool  # set when the test signals it, or expects it to exit by itself
    allowed: frozenset[str]  # exception class names the test expects it to log
    _scanned: int = 0  # bytes of its log already checked for exceptions

    def exceptions_logged(self) -> set[str]:
        """Class names (last dotted part) of every exception in its log so far."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return {name.rsplit(".", 1)[-1] for name in _EXCEPTION_LINE.findall(text)}

    def unexpected_exceptions(self) -> list[str]:
        """Exception lines its log gained since the last call (whole lines), minus the allowed ones."""
        with self.log.open("rb") as f:
            f.seek(self._scanned)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self._scanned += end
        found = _EXCEPTION_LINE.findall(chunk[:end].decode(errors="replace"))
        return [name for name in found if name.rsplit(".", 1)[-1] not in self.allowed]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


class Procs:
    """Every process one test started; `kill_all()` (a fixture finalizer) reaps them whatever happened."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, Proc] = {}

    def spawn(
        self,
        name: str,
        args: list[str],
        env: Mapping[str, str],
        *,
        may_exit: bool = False,
        allow: Iterable[str] = (),
    ) -> Proc:
        """Start `python args...`; `allow`: exception class names it may log without failing the test."""
        if name in self.procs:
            raise ValueError(f"process name {name!r} used twice in one test")
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [sys.executable, *args],
                cwd=ROOT,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of pytest is not delivered to it behind our back
            )
        proc = Proc(name, popen, log, may_exit, frozenset(allow))
        self.procs[name] = proc
        return proc

    def signal(self, proc: Proc, sig: signal.Signals) -> None:
        proc.may_exit = True
        if proc.alive():
            proc.popen.send_signal(sig)

    def kill(self, proc: Proc) -> None:
        """SIGKILL and reap: once this returns the process and its sockets are gone."""
        self.signal(proc, signal.SIGKILL)
        proc.popen.wait(10)

    def wait_exit(self, proc: Proc, timeout: float) -> int:
        """Its exit code; fails (with its log) if it is still running after `timeout` seconds."""
        proc.may_exit = True
        try:
            return proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{proc.name} still running {timeout:.0f}s later") from None

    def check(self) -> None:
        """Fail at once when a process exits that the test did not stop, or logs an exception it did
        not expect (a failing tick is retried forever: waiting on would only time out)."""
        for proc in self.procs.values():
            if not proc.may_exit and not proc.alive():
                raise AssertionError(
                    f"{proc.name} (pid {proc.pid}) exited by itself with code {proc.popen.returncode}"
                )
            unexpected = proc.unexpected_exceptions()
            if unexpected:
                raise AssertionError(
                    f"{proc.name} (pid {proc.pid}) logged {', '.join(unexpected)}:\n{tail(proc.log)}"
                )

    def report(self) -> str:
        parts = []
        for proc in self.procs.values():
            state = "running" if proc.alive() else f"exit code {proc.popen.returncode}"
            parts.append(f"--- {proc.name} (pid {proc.pid}, {state}): {proc.log}\n{tail(proc.log)}")
        return "\n".join(parts)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.alive():
                proc.popen.kill()
        for proc in self.procs.values():
            try:
                proc.popen.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot stop
                print(f"fault tier: {proc.name} (pid {proc.pid}) survived SIGKILL", file=sys.stderr)


def serving(proc: Proc) -> bool:
    """Whether a worker has logged the line it logs as its loop begins ("working on ...")."""
    return proc.log.exists() and "working on " in proc.log.read_text(errors="replace")


def tcp_peers(pid: int) -> list[tuple[int, int]]:
    """(local port, remote port) of every TCP socket `pid` has open, from /proc (Linux only)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir() if fd_dir.exists() else ():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since we listed it
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    peers = []
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in inodes:
                peers.append((int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)))
    return peers
