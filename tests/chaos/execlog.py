"""The chaos suite's execution logs: a handler appends one record per run, in one O_APPEND write.

A SIGKILL can cut that write short (Linux hands a dying process a partial write), and the next
writer's record then lands on the same line. So every record starts on a line of its own and ends
with a mark: a line without the mark is a torn record. Readers skip torn records; they can only be
runs of a process killed while logging them, which never acked them, so skipping one can hide a
redundant run but never make a lost, double-acked or unexpected one.
"""

from __future__ import annotations

import os
from pathlib import Path

END = " ."


def append(env_var: str, *fields: object) -> None:
    fd = os.open(os.environ[env_var], os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, ("\n" + " ".join(str(f) for f in fields) + END + "\n").encode())
    finally:
        os.close(fd)


def records(path: Path) -> list[list[str]]:
    """Every whole record's fields, in log order (torn records left out)."""
    if not path.exists():
        return []
    return [line[: -len(END)].split() for line in path.read_text().splitlines() if line.endswith(END)]
