"""Start, watch and stop duecast processes (a dispatcher and N workers) for the demo and benchmarks.

Children inherit the environment plus the settings file given; stopping is SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Fleet:
    config: Path  # TOML settings file every child reads (DUECAST_CONFIG)
    app: str  # handler module for workers
    log_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.extra_env, "DUECAST_CONFIG": str(self.config)}
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs[name] = proc
        return proc

    def start_dispatcher(self, name: str = "dispatcher") -> subprocess.Popen[bytes]:
        return self._spawn(name, ["-m", "duecast.dispatcher"])

    def start_worker(self, name: str, *extra: str) -> subprocess.Popen[bytes]:
        return self._spawn(name, ["-m", "duecast.worker", "--app", self.app, *extra])

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def signal(self, name: str, sig: signal.Signals) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(sig)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) used so far by each live child and its own children (the processes
        of `worker --processes N`), from Linux /proc."""
        live = {name: proc.pid for name, proc in self.procs.items() if proc.poll() is None}
        if not live:
            return {}
        parents = _parents()
        return {name: sum(cpu_seconds(p) for p in _tree(pid, parents)) for name, pid in live.items()}

    def stop(self, timeout_s: float = 15.0) -> dict[str, int]:
        """SIGTERM everyone, wait up to `timeout_s`, SIGKILL stragglers; returns exit codes."""
        for name in self.alive():
            self.signal(name, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes: dict[str, int] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, and of its children it has waited for, from /proc/<pid>/stat (0.0
    where /proc is not available)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(f) for f in fields[11:15]) / ticks


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process /proc shows (empty where there is no /proc)."""
    out = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            out[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
    return out


def _tree(pid: int, parents: dict[int, int]) -> list[int]:
    """`pid` and its descendants."""
    out, todo = [pid], [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        out.extend(kids)
        todo.extend(kids)
    return out
