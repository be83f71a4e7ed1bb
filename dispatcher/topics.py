"""The topics duty: retention (prune what every group finished), alerts (consumption timeouts, groups
holding messages past retention) and the topic gauges. A leader duty (dispatcher/scheduler.py).
"""

from __future__ import annotations

import logging
import threading

from ..shared.process.failures import retry_startup
from ..shared.process.loop import Role, Tick
from ..shared.settings import Settings, TopicsSettings
from ..shared.storage.db import Database
from ..shared.storage.topic_admin import TopicAdmin
from ..shared.storage.topic_status import TopicMonitor
from . import topic_metrics

log = logging.getLogger("duecast.topics")


class TopicKeeper:
    name = "topics"

    def __init__(self, admin: TopicAdmin, monitor: TopicMonitor, settings: TopicsSettings) -> None:
        self.admin = admin
        self.monitor = monitor
        self.settings = settings
        self.pruned = 0

    def tick(self) -> Tick:
        """One batch of pruning; once nothing is left to prune, the check, then a rest of an interval."""
        n = self.admin.prune(self.settings.prune_batch)
        self.pruned += n
        if n:
            log.info("pruned %d message(s) every group had finished", n)
        if n >= self.settings.prune_batch:
            return Tick(0.0, idle=False)
        self.check()
        return Tick(self.settings.maintain_interval_s, idle=True)

    def check(self) -> None:
        """Alerts in the log and gauges for /metrics, from one read of every group."""
        statuses = self.monitor.groups()
        topic_metrics.publish(statuses)
        for s in statuses:
            if s.timeouts:
                log.warning(
                    "group %s of %s: %d message(s) running longer than %.0fs (oldest %.0fs; one per batch: "
                    "those waiting behind it in its batch are not counted)",
                    s.group,
                    s.topic,
                    s.timeouts,
                    self.settings.group(s.topic, s.group).timeout_s,
                    s.oldest_running_s or 0.0,
                )
            if s.behind_retention:
                log.warning(
                    "group %s of %s is behind retention: its oldest unfinished message is %.0fs old; "
                    "it is kept until the group finishes it",
                    s.group,
                    s.topic,
                    s.lag_s or 0.0,
                )

    def maintain(self) -> None:
        """One pass, as the loop's drain mode runs it: prune until nothing is left to prune, then check."""
        while not self.tick().idle:
            pass


def topic_duties(settings: Settings, stop: threading.Event) -> list[tuple[Role, float]]:
    """The topics duty and its interval, on its own connection, when topics are declared."""
    if not settings.topics.names:
        return []
    admin = TopicAdmin(Database(settings.mysql), settings.topics)
    retry_startup(admin.ensure_groups, what="the topic groups' rows", stop=stop)
    keeper = TopicKeeper(admin, TopicMonitor(admin.db, settings.topics), settings.topics)
    return [(keeper, settings.topics.maintain_interval_s)]
