"""Lease settings a worker could not keep, refused at start-up (issue 4: "job timeout < lease is
validated at start-up"; docs/reliability.md says how that reads with extended leases).

A lease is renewed every lease/3 and the worker fences itself 0.8 of a lease after the last
confirmed renewal, so the first renewal, stalled once connecting and once reading on the keeper's
connection (mysql.lease_keeper_timeout_s each), must be over before the fence.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from duecast.shared.policy import keeper_fits, shortest_lease_s
from duecast.shared.settings import Settings, load_settings
from tests.unit.settings.bad_settings_support import SECRET, everything_printed

TOPICS = {"names": ["orders"], "groups": [{"topic": "orders", "name": "billing"}]}


def _settings(**sections: Any) -> Settings:
    return Settings(**sections)


@pytest.mark.parametrize(
    ("lease_s", "timeout_s"),
    [
        (8.0, 2.0),  # renewal at 2.67 s + 4 s of stalls = 6.67 s, past the fence at 6.4 s
        (2.0, 0.5),  # the smallest lease allowed, with a timeout it cannot absorb
        (15.0, 3.5),  # the default lease with a keeper timeout of 3.5 s: 5 + 7 = 12, the fence itself
        (3.0, 2.0),  # the chaos suite's lease with the default keeper timeout
    ],
)
def test_a_jobs_lease_too_short_for_the_keepers_timeout_is_refused(lease_s: float, timeout_s: float) -> None:
    with pytest.raises(
        ValidationError, match=r"jobs\.lease_s .* too short for mysql\.lease_keeper_timeout_s"
    ) as err:
        _settings(jobs={"lease_s": lease_s, "timeout_s": 60}, mysql={"lease_keeper_timeout_s": timeout_s})
    text = str(err.value)
    assert f"longer than {shortest_lease_s(timeout_s):.2f}s" in text  # says what would do


@pytest.mark.parametrize(("lease_s", "timeout_s"), [(9.0, 2.0), (15.0, 2.0), (3.0, 0.5), (2.0, 0.2)])
def test_a_lease_that_fits_the_keepers_timeout_is_accepted(lease_s: float, timeout_s: float) -> None:
    s = _settings(jobs={"lease_s": lease_s, "timeout_s": 60}, mysql={"lease_keeper_timeout_s": timeout_s})
    assert (s.jobs.lease_s, s.mysql.lease_keeper_timeout_s) == (lease_s, timeout_s)


def test_the_defaults_fit() -> None:
    s = Settings()
    assert keeper_fits(s.jobs.lease_s, s.mysql.lease_keeper_timeout_s)
    assert keeper_fits(s.topics.lease_s, s.mysql.lease_keeper_timeout_s)


def test_the_boundary_is_the_one_the_message_names() -> None:
    shortest = shortest_lease_s(2.0)  # 8.57 s
    assert not keeper_fits(shortest - 0.01, 2.0)
    assert keeper_fits(shortest + 0.01, 2.0)
    _settings(jobs={"lease_s": shortest + 0.01, "timeout_s": 60})
    with pytest.raises(ValidationError, match=r"longer than 8\.57s"):
        _settings(jobs={"lease_s": shortest - 0.01, "timeout_s": 60})


def test_a_topics_lease_too_short_is_refused_only_when_a_cluster_group_holds_leases() -> None:
    with pytest.raises(ValidationError, match=r"topics\.lease_s \(5\.0\) is too short"):
        _settings(topics={**TOPICS, "lease_s": 5})
    # Broadcast members hold no leases; without groups no topic lease is ever taken.
    _settings(topics={"names": ["orders"], "lease_s": 5})
    broadcast = {"topic": "orders", "name": "cache", "mode": "broadcast"}
    _settings(topics={"names": ["orders"], "groups": [broadcast], "lease_s": 5})


def test_a_disabled_jobs_table_takes_no_lease_to_check() -> None:
    s = _settings(jobs={"enabled": False, "lease_s": 2, "timeout_s": 60})
    assert s.jobs.lease_s == 2
    with pytest.raises(ValidationError, match="too short"):
        _settings(jobs={"lease_s": 2, "timeout_s": 60})


def test_the_check_reads_the_environment_like_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_MYSQL__LEASE_KEEPER_TIMEOUT_S", "4")
    with pytest.raises(ValidationError, match=r"jobs\.lease_s \(15\.0\) is too short"):
        load_settings()
    monkeypatch.setenv("DUECAST_JOBS__LEASE_S", "20")
    assert load_settings().mysql.lease_keeper_timeout_s == 4


def test_the_error_never_prints_a_secret() -> None:
    with pytest.raises(ValidationError) as err:
        _settings(
            mysql={"password": SECRET, "lease_keeper_timeout_s": 5},
            redis={"url": f"redis://user:{SECRET}@127.0.0.1:6379/0"},
        )
    printed = everything_printed(err.value)
    assert "too short" in printed
    assert SECRET not in printed


def test_a_sources_lease_too_short_is_refused_by_name() -> None:
    src = {"name": "users", "table": "users", "due_column": "checked_at", "period_s": 10}
    with pytest.raises(ValidationError, match=r"lease_s of source users \(4\.0\) is too short") as err:
        _settings(jobs={"enabled": False}, sources=[{**src, "lease_s": 4}])
    assert f"longer than {shortest_lease_s(2.0):.2f}s" in str(err.value)
    s = _settings(jobs={"enabled": False}, sources=[src])
    assert (s.sources[0].lease_s, s.sources[0].timeout_s) == (15.0, 30.0)  # the defaults fit
