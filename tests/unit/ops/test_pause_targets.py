"""shared.api.pauses.target: what `duecast pause KIND NAMES` names, and the one-line refusals."""

from __future__ import annotations

import pytest

from duecast.shared.api.pauses import PauseError, target
from duecast.shared.settings import Settings
from tests.unit.fakes import rescan_source


@pytest.fixture
def settings() -> Settings:
    return Settings(
        sources=[rescan_source()],
        jobs={"enabled": True, "queues": ["default", "mail"]},  # type: ignore[arg-type]
        topics={  # type: ignore[arg-type]
            "names": ["orders"],
            "groups": [
                {"topic": "orders", "name": "billing"},
                {"topic": "orders", "name": "caches", "mode": "broadcast"},
            ]
        },
    )


def test_each_kind_names_the_dispatch_source_it_stops(settings: Settings) -> None:
    assert target(settings, "source", ("users",)) == ("users", "users")
    assert target(settings, "queue", ("mail",)) == ("mail", "jobs.mail")
    assert target(settings, "group", ("orders", "billing")) == ("orders billing", "topics.orders-billing")
    # A task stops no dispatch source: its queue's claims and starts leave its jobs out.
    assert target(settings, "task", ("send_mail",)) == ("send_mail", "")


@pytest.mark.parametrize(
    ("kind", "names", "says"),
    [
        ("source", ("nope",), "no source named 'nope' (configured: users)"),
        ("queue", ("nope",), "no job queue named 'nope' (configured: default, mail)"),
        ("group", ("orders", "nope"), "no such cluster group: 'orders nope' (cluster groups: orders billing"),
        ("group", ("orders", "caches"), "a broadcast group"),
        ("group", ("orders",), "say source NAME, queue NAME or group TOPIC GROUP"),
        ("source", ("a", "b"), "say source NAME"),
        ("task", ("x", "y"), "say source NAME"),  # a task is one name
        ("tasks", ("x",), "say source NAME"),
    ],
)
def test_unknown_names_are_refused_in_one_line(
    settings: Settings, kind: str, names: tuple[str, ...], says: str
) -> None:
    with pytest.raises(PauseError) as refused:
        target(settings, kind, names)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)
