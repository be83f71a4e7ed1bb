"""What the dashboard's views share: settings, the history of readings, and one MySQL connection per
server thread (PyMySQL connections are not thread-safe) for the pages that query on request.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ...shared.settings import ScheduleSettings, Settings
from ...shared.storage.admin.dashboard_store import DashboardStore
from ...shared.storage.admin.job_admin import JobAdmin
from ...shared.storage.db import Database
from ..history import History


@dataclass
class WebContext:
    settings: Settings
    history: History
    schedules: list[ScheduleSettings]  # from settings, plus those the --app Registry declares
    wake: Callable[[], None] = lambda: None  # tells the dispatcher a job is pending now (Enqueuer.wake)
    _local: threading.local = field(default_factory=threading.local)

    def db(self) -> Database:
        db: Database | None = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = Database(self.settings.mysql)
        return db

    def admin(self) -> JobAdmin:
        return JobAdmin(self.db(), self.settings.jobs)

    def dashboard(self) -> DashboardStore:
        return DashboardStore(self.db(), self.settings.jobs)

    @property
    def actions_enabled(self) -> bool:
        return self.settings.web.token is not None and self.settings.jobs.enabled

    def token_ok(self, given: str) -> bool:
        """Constant-time comparison with web.token; always False when no token is set."""
        token = self.settings.web.token
        return token is not None and hmac.compare_digest(given.encode(), token.get_secret_value().encode())
