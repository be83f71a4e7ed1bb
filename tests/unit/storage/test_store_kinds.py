"""Which store runs a source: chosen by the settings section that declares it, not by its name."""

from __future__ import annotations

from duecast.shared.process.runtime import store_kinds
from duecast.shared.settings import Settings

USERS = {"name": "users", "table": "users", "due_column": "updated_time", "period_s": 10}
TOPICS = {
    "names": ["orders"],
    "groups": [
        {"topic": "orders", "name": "billing"},
        {"topic": "orders", "name": "audit", "mode": "broadcast"},
    ],
}


def test_job_queues_and_cluster_groups_are_leased_and_every_other_source_is_a_table() -> None:
    settings = Settings(sources=[USERS], jobs={"queues": ["default", "mail"]}, topics=TOPICS)
    kinds = store_kinds(settings)
    assert kinds == {"jobs.default": "jobs", "jobs.mail": "jobs", "topics.orders-billing": "group"}
    # The configured table and the broadcast group (read by its members, not dispatched) are not leased.
    assert {s.name for s in settings.all_sources()} - set(kinds) == {"users"}
