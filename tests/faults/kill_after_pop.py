"""`python -m tests.faults.kill_after_pop --app ... --source ...`: the real worker, which SIGKILLs
itself the moment a pop returns entries, before any SQL.

The instant is reached through the role's own seam (main()'s `make_queue`), so production code
carries no fault branch: this module wraps the queue the worker would have built.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence

from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.runtime import build_queue
from duecast.shared.settings import Settings
from duecast.worker.main import main


class KilledAfterPop(ReadyQueue):
    def pop_held(
        self, worker: str, sources: Sequence[str], count: int | Sequence[int], timeout_s: float
    ) -> tuple[str, list[bytes]] | None:
        popped = super().pop_held(worker, sources, count, timeout_s)
        if popped is not None:
            logging.getLogger("tests.faults").warning(
                "fault: SIGKILL right after popping %d entries", len(popped[1])
            )
            os.kill(os.getpid(), signal.SIGKILL)
        return popped


def killed_after_pop(settings: Settings) -> ReadyQueue:
    queue = build_queue(settings)
    return KilledAfterPop(queue.client, queue.keys)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], make_queue=killed_after_pop))
