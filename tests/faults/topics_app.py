"""Consumers the topics fault test's worker processes run (`--app tests.faults.topics_app`).

Three transactional cluster groups of topic "orders": each effect (a row in the table named by
DUECAST_TEST_EFFECTS) commits with the message's ack or not at all; and a broadcast group, "cache",
whose members log with their name (DUECAST_TOPICS__MEMBER). Every execution first appends
"group id attempt pid member" to DUECAST_TEST_EXEC_LOG (one O_APPEND write per line), independent of
duecast's bookkeeping. A message whose payload says {"park": <group>} parks that group's consumer:
it writes DUECAST_TEST_BATCH_MARKER and waits until DUECAST_TEST_GATE exists (processes given a gate).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pymysql.cursors

from duecast.shared.api.handlers import Registry
from duecast.shared.api.messages import Message

GROUPS = ("billing", "shipping", "audit")
GATE_MAX_S = 60.0

handlers = Registry()


def _log(message: Message) -> None:
    who = os.environ.get("DUECAST_TOPICS__MEMBER", "-")
    line = f"{message.group} {message.id} {message.attempt} {os.getpid()} {who}\n".encode()
    fd = os.open(os.environ["DUECAST_TEST_EXEC_LOG"], os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _park(message: Message) -> None:
    gate, marker = os.environ.get("DUECAST_TEST_GATE"), os.environ.get("DUECAST_TEST_BATCH_MARKER")
    if not gate or not marker or message.payload.get("park") != message.group:
        return
    tmp = Path(f"{marker}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "group": message.group, "id": message.id}))
    tmp.replace(marker)
    deadline = time.monotonic() + GATE_MAX_S
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


def effect(message: Message, cursor: pymysql.cursors.Cursor) -> None:
    _log(message)
    _park(message)
    table = os.environ["DUECAST_TEST_EFFECTS"]
    cursor.execute(
        f"INSERT INTO `{table}` (grp, msg, attempt, pid) VALUES (%s, %s, %s, %s)",
        (message.group, message.id, message.attempt, os.getpid()),
    )


for _group in GROUPS:
    handlers.consumer("orders", group=_group, transactional=True)(effect)


@handlers.consumer("orders", group="cache")
def cache(message: Message) -> None:
    """A broadcast member: logged with its member name (DUECAST_TOPICS__MEMBER), no effect."""
    _log(message)
    _park(message)
