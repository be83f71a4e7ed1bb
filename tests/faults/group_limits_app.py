"""The consumer of the group limits fault tests (`--app tests.faults.group_limits_app`): cluster
group "paced" of topic "orders", an async consumer that logs "S"/"E" lines of its message's id to
DUECAST_TEST_EXEC_LOG around a DUECAST_TEST_ROW_DELAY_MS wait (tests/faults/limits_app.py's format)."""

from __future__ import annotations

import asyncio
import os

from duecast.shared.api.handlers import Registry
from duecast.shared.api.messages import Message
from tests.faults.limits_app import _log

handlers = Registry()


@handlers.consumer("orders", group="paced")
async def paced(message: Message) -> None:
    _log("S", message.id)
    await asyncio.sleep(int(os.environ.get("DUECAST_TEST_ROW_DELAY_MS", "0")) / 1000)
    _log("E", message.id)
