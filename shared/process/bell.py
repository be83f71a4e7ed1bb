"""A wake-up that is safe to give from a signal handler (Bell): what the worker supervisor's loop
waits on, and what turns SIGTERM into a role's stop (shared/process/loop.py)."""

from __future__ import annotations

import contextlib
import os
import select


class Bell:
    """A wake-up a signal handler may give: a byte down a pipe. Not a threading.Event: its set() takes
    a lock, and a handler runs in the main thread between two of its bytecodes, wherever it is; one
    that comes while that thread holds the lock (inside the Event's own wait(), clear() or set())
    waits on itself forever. A burst of children's exits hung a `--processes 3` parent so in one CI
    run (worker/supervisor.py). A pipe's write takes no lock."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def ring(self) -> None:
        if self._write < 0:  # closed: the loop has ended
            return
        with contextlib.suppress(BlockingIOError):  # the pipe is full: it has been rung already
            os.write(self._write, b"\0")

    def wait(self, timeout_s: float | None) -> None:
        """Until rung since the last clear(), or timeout_s (None: no limit). A signal's handler may
        ring it while it waits: select() resumes after a handler (PEP 475) and sees the byte."""
        select.select([self._read], [], [], timeout_s)

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):  # drained
            while os.read(self._read, 4096):
                pass

    def close(self) -> None:
        fds, self._read, self._write = (self._read, self._write), -1, -1
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
