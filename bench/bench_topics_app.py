"""The workers' consumer module for bench/topics.py: a no-op consumer for every group it declares."""

from __future__ import annotations

from duecast import Message, Registry

handlers = Registry()
CLUSTER = [f"g{n}" for n in range(1, 9)]  # bench/topics.py declares the first --groups of these


def noop(message: Message) -> None:
    """Does nothing: returning None marks the message done in its group."""


for _group in CLUSTER:
    handlers.consumer("bench", group=_group)(noop)
handlers.consumer("bench", group="fanout")(noop)  # the broadcast group (--members)
