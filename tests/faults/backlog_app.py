"""The consumer of the backlog fault test (`--app tests.faults.backlog_app`): cluster group "slow" of
topic "orders", a plain consumer that takes DUECAST_TEST_CONSUME_S per message (a slow downstream
call), so a backlog stays queued while a worker is killed. Every execution first appends
"group id attempt pid" to DUECAST_TEST_EXEC_LOG (one O_APPEND write). A message whose payload says
{"park": true} writes DUECAST_TEST_BATCH_MARKER and waits until DUECAST_TEST_GATE exists (in
processes given a gate), so the test kills its worker while it holds a known batch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from duecast.shared.api.handlers import Registry
from duecast.shared.api.messages import Message

GATE_MAX_S = 60.0

handlers = Registry()


def _park(message: Message) -> None:
    gate, marker = os.environ.get("DUECAST_TEST_GATE"), os.environ.get("DUECAST_TEST_BATCH_MARKER")
    if not gate or not marker or not message.payload.get("park"):
        return
    tmp = Path(f"{marker}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "id": message.id}))
    tmp.replace(marker)
    deadline = time.monotonic() + GATE_MAX_S
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


@handlers.consumer("orders", group="slow")
def slow(message: Message) -> None:
    line = f"{message.group} {message.id} {message.attempt} {os.getpid()}\n".encode()
    fd = os.open(os.environ["DUECAST_TEST_EXEC_LOG"], os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    _park(message)
    time.sleep(float(os.environ.get("DUECAST_TEST_CONSUME_S", "0")))  # the downstream call's time
