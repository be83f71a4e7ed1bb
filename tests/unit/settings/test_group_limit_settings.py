"""rate_limit_per_s, rate_burst and max_running on a topic's cluster consumer group: they reach its
dispatchable source, a broadcast group refuses them, and every bad value is refused in one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from duecast import cli
from duecast.shared.settings.topics import TopicsSettings
from duecast.shared.storage.limits import limit_name


def _topics(**group: Any) -> TopicsSettings:
    billing = {"topic": "orders", "name": "billing", **group}
    return TopicsSettings(names=["orders"], groups=[billing, {"topic": "orders", "name": "audit"}])


def test_a_groups_limits_reach_its_source_and_its_bucket_is_named_group_topic_name() -> None:
    (billing, audit) = _topics(rate_limit_per_s=50, rate_burst=5, max_running=7).group_sources()
    assert (billing.rate_limit_per_s, billing.rate_burst, billing.max_running) == (50, 5, 7)
    assert billing.limited
    assert billing.burst() == 5
    assert not audit.limited, "one group's limits are not its topic's other groups'"
    assert limit_name(billing.name) == "group:orders/billing"
    assert limit_name("users") == "users"
    assert limit_name("jobs.mail") == "jobs.mail"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"rate_limit_per_s": 0}, "rate_limit_per_s"),
        ({"rate_limit_per_s": math.nan}, "rate_limit_per_s"),
        ({"rate_limit_per_s": math.inf}, "rate_limit_per_s"),
        ({"rate_limit_per_s": 1e12}, "rate_limit_per_s"),
        ({"max_running": 0}, "max_running"),
        ({"max_running": 2.5}, "max_running"),
        ({"rate_burst": 10}, "rate_burst is set without rate_limit_per_s"),
        ({"rate_limit_per_s": 10, "rate_burst": 0.5}, "rate_burst"),
        ({"rate_limit": 10}, "rate_limit"),
        (
            {"mode": "broadcast", "max_running": 3},
            "group billing: rate_limit_per_s and max_running are for cluster groups",
        ),
    ],
)
def test_bad_group_limits_are_refused(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _topics(**limits)


def test_the_cli_refuses_a_bad_group_limit_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "duecast.toml"
    config.write_text(
        '[topics]\nnames = ["orders"]\n\n[[topics.groups]]\ntopic = "orders"\nname = "billing"\n'
        "rate_limit_per_s = -5\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("DUECAST_CONFIG", str(config))
    assert cli.main(["status"]) == 2
    out, err = capsys.readouterr()
    assert "duecast status: invalid settings" in err
    assert "rate_limit_per_s" in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err
