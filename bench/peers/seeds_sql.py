"""The seeds' jobs table and its connection: DDL and session settings shared by the seeds driver and workers.

Connection settings come from the same DUECAST_MYSQL__* environment duecast reads.
"""

from __future__ import annotations

import os

import pymysql

TABLE = "seed_jobs"

# The seeds' queue table: an owner column (NULL = free) and one composite index, (owner, id),
# that serves the claim (owner IS NULL, in id order) and the read by owner (seed 001).
DDL = f"""CREATE TABLE {TABLE} (
  id BIGINT NOT NULL AUTO_INCREMENT,
  task VARCHAR(191) NOT NULL,
  payload LONGTEXT NOT NULL,
  run_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  owner BIGINT UNSIGNED NULL,
  claimed_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  KEY owner_id (owner, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def connect(autocommit: bool) -> pymysql.Connection[pymysql.cursors.Cursor]:
    """A session like duecast's: READ COMMITTED, utf8mb4 (the seeds name no isolation level)."""
    conn = pymysql.connect(
        host=os.environ.get("DUECAST_MYSQL__HOST", "127.0.0.1"),
        port=int(os.environ.get("DUECAST_MYSQL__PORT", "3306")),
        user=os.environ.get("DUECAST_MYSQL__USER", "root"),
        password=os.environ.get("DUECAST_MYSQL__PASSWORD", ""),
        database=os.environ["DUECAST_MYSQL__DATABASE"],
        charset="utf8mb4",
        autocommit=autocommit,
    )
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn
