"""`python -m tests.faults.crash_after_commit`: the real dispatcher, whose first push exits the
process (code 70) after the claim's COMMIT and before its RPUSH.

The instant is reached through the role's own seam (main()'s `make_queue`), so production code
carries no fault branch: this module wraps the queue the dispatcher would have built.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from duecast.dispatcher.main import main
from duecast.shared.entries import Entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.runtime import build_queue
from duecast.shared.settings import Settings

EXIT_CODE = 70


class ExitBeforePush(ReadyQueue):
    def push(self, source: str, entries: Sequence[Entry]) -> None:
        logging.getLogger("tests.faults").warning(
            "fault: exiting between the COMMIT and the RPUSH of %d entries of %s", len(entries), source
        )
        os._exit(EXIT_CODE)


def exit_before_push(settings: Settings) -> ReadyQueue:
    queue = build_queue(settings)
    return ExitBeforePush(queue.client, queue.keys)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], make_queue=exit_before_push))
