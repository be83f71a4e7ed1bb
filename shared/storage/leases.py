"""The dispatcher leader's lease row: take or renew it, read what the database granted, hand it over.
Runs shared.queries.registry.LeaderSQL; when to renew and whether to act is dispatcher/leader.py's.
"""

from __future__ import annotations

from ..queries.registry import LeaderSQL, render_leases
from .db import Database


class LeaseStore:
    def __init__(self, db: Database, table: str) -> None:
        self.db = db
        self.sql: LeaderSQL = render_leases(table)

    def acquire(self, name: str, holder: str, lease_s: float) -> float:
        """Take or renew `name` for `holder`; returns the seconds it is ours for (0: someone else's)."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.acquire, (name, holder, round(lease_s * 1e6)))
            cur.execute(self.sql.holder, (name,))
            row = cur.fetchone()
        if row is None or row[0] != holder:
            return 0.0
        return max(0.0, float(row[1]) / 1e6)

    def resign(self, name: str, holder: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(self.sql.resign, (name, holder))
