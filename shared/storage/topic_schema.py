"""The six tables of topics (`duecast migrate` creates the missing ones) and the start-up check.

Names come from topics.table_prefix; every table is InnoDB, utf8mb4. Nothing here reads or writes rows.
"""

from __future__ import annotations

from ..identifiers import quote
from ..settings import TopicsSettings
from ..states import DUE_INDEX, STATE_COLUMN
from .schema import DISPATCH_COLUMNS, SchemaError, describe, unseen
from .units import Cursor

# name -> (columns, keys). The first key is the PRIMARY KEY.
_TABLES: dict[str, tuple[dict[str, str], list[str]]] = {
    # One row per topic. Publishers lock it (UPDATE last_seq) until they commit: a topic's ids are
    # gap-free and commit in id order, which is what makes a position ("everything up to n") safe.
    "topics": (
        {
            "id": "INT UNSIGNED NOT NULL AUTO_INCREMENT",
            "name": "VARCHAR(32) NOT NULL",
            "last_seq": "BIGINT UNSIGNED NOT NULL DEFAULT 0",  # the newest message's id
            "created_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
        },
        ["PRIMARY KEY (`id`)", "UNIQUE KEY `dc_name` (`name`)"],
    ),
    # Append-only; deleted only by retention, a prefix of ids at a time.
    "messages": (
        {
            "topic_id": "INT UNSIGNED NOT NULL",
            "seq": "BIGINT UNSIGNED NOT NULL",  # the message id within its topic: 1, 2, 3...
            "msg_key": "VARCHAR(191) NULL",
            "payload": "LONGTEXT NOT NULL",  # JSON text
            "created_at": "DATETIME(6) NOT NULL",
        },
        [
            "PRIMARY KEY (`topic_id`, `seq`)",
            "KEY `dc_key` (`topic_id`, `msg_key`)",
            "KEY `dc_time` (`topic_id`, `created_at`)",
        ],
    ),
    "groups": (
        {
            "id": "INT UNSIGNED NOT NULL AUTO_INCREMENT",
            "topic_id": "INT UNSIGNED NOT NULL",
            "name": "VARCHAR(32) NOT NULL",
            "mode": "VARCHAR(16) NOT NULL",
            "position": "BIGINT UNSIGNED NOT NULL",  # cluster: the newest message it has a delivery for
            "skipped": "BIGINT UNSIGNED NOT NULL DEFAULT 0",  # messages gone before it could read them
            "created_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
            "reset_at": "DATETIME(6) NULL",
        },
        ["PRIMARY KEY (`id`)", "UNIQUE KEY `dc_name` (`topic_id`, `name`)"],
    ),
    # Cluster groups: one row per (group, message), dispatched like a job.
    "deliveries": (
        {
            "group_id": "INT UNSIGNED NOT NULL",
            "seq": "BIGINT UNSIGNED NOT NULL",
            "run_at": "DATETIME(6) NOT NULL",  # pending: when it may run (retries wait here)
            "errors": "SMALLINT UNSIGNED NOT NULL DEFAULT 0",
            "interruptions": "SMALLINT UNSIGNED NOT NULL DEFAULT 0",
            "replays": "INT UNSIGNED NOT NULL DEFAULT 0",
            "started_at": "DATETIME(6) NULL",
            "lease_until": "DATETIME(6) NULL",
            "worker": "VARCHAR(128) NULL",
            "finished_at": "DATETIME(6) NULL",
            "last_error": "MEDIUMTEXT NULL",
            **DISPATCH_COLUMNS,
        },
        [
            "PRIMARY KEY (`group_id`, `seq`)",
            f"KEY {quote(DUE_INDEX)} ({quote(STATE_COLUMN)}, `group_id`, `run_at`)",
        ],
    ),
    # The trace: every attempt that did not end its delivery as done, and done ones a replay revived.
    "attempts": (
        {
            "group_id": "INT UNSIGNED NOT NULL",
            "seq": "BIGINT UNSIGNED NOT NULL",
            "attempt": "INT UNSIGNED NOT NULL",
            "outcome": "VARCHAR(16) NOT NULL",
            "worker": "VARCHAR(128) NULL",
            "dispatched_at": "DATETIME(6) NULL",
            "started_at": "DATETIME(6) NULL",
            "ended_at": "DATETIME(6) NULL",
            "error": "MEDIUMTEXT NULL",
        },
        ["PRIMARY KEY (`group_id`, `seq`, `attempt`)"],
    ),
    # Broadcast groups: one row per member, holding its own position.
    "members": (
        {
            "group_id": "INT UNSIGNED NOT NULL",
            "name": "VARCHAR(100) NOT NULL",
            "position": "BIGINT UNSIGNED NOT NULL",
            "owner": "VARCHAR(128) NULL",  # the process reading for it (host:pid)
            "heartbeat_at": "DATETIME(6) NOT NULL",
            "joined_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
            "handled": "BIGINT UNSIGNED NOT NULL DEFAULT 0",
            "failed": "BIGINT UNSIGNED NOT NULL DEFAULT 0",
            "skipped": "BIGINT UNSIGNED NOT NULL DEFAULT 0",
        },
        ["PRIMARY KEY (`group_id`, `name`)"],
    ),
}
KINDS = tuple(_TABLES)


def topic_table_ddl(topics: TopicsSettings, kind: str) -> str:
    columns, keys = _TABLES[kind]
    body = ",\n  ".join([*(f"{quote(n)} {t}" for n, t in columns.items()), *keys])
    return (
        f"CREATE TABLE IF NOT EXISTS {quote(topics.table(kind))} (\n  {body}\n)"
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )


def topic_steps(cur: Cursor | None, topics: TopicsSettings) -> list[str]:
    """The CREATE TABLEs `duecast migrate` needs to run (all of them when `cur` is None: no database)."""
    if not topics.names:
        return []
    return [
        topic_table_ddl(topics, kind)
        for kind in KINDS
        if cur is None or not describe(cur, topics.table(kind)).columns
    ]


def check_topic_tables(cur: Cursor, topics: TopicsSettings) -> None:
    """Raise SchemaError unless every topic table exists with every column this version uses."""
    for kind, (columns, _) in _TABLES.items():
        have = describe(cur, topics.table(kind)).columns
        what = f"the topics table {topics.table(kind)}"
        if not have:
            raise SchemaError(unseen(cur, what, topics.table(kind)))
        missing = [c for c in columns if c not in have]
        if missing:
            raise SchemaError(f"{what} lacks {', '.join(missing)}; run `duecast migrate`")
