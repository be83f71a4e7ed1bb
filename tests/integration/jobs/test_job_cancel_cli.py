"""`duecast jobs cancel ID|filter` and what the other commands say of a cancelled job (show, list,
status, replay, discard), through duecast.cli.commands.main on the test database."""

from __future__ import annotations

import pymysql
import pytest

from duecast import cli
from duecast.shared.process.failures import EXIT_NO, EXIT_UNCONFIRMED
from duecast.shared.states import State
from tests.integration import jobs_app
from tests.integration.jobs.test_jobs_cli import run_all, states, table  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration


def test_cancel_by_id_and_by_filter_with_confirmation_and_counts(
    table: str,  # noqa: F811
    sql: pymysql.cursors.Cursor,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for args in (
        ["record", "--payload", '"1"'],
        ["record", "--queue", "mail"],
        ["record", "--delay", "3600"],
    ):
        assert cli.main(["enqueue", *args]) == 0
    capsys.readouterr()
    # A filter in a script: one line, exit 4, nothing changed; --yes does it.
    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # noqa: SIM115 - closed with the test
    assert cli.main(["jobs", "cancel", "--queue", "mail"]) == EXIT_UNCONFIRMED
    assert "cancel 1 job(s) needs confirmation" in capsys.readouterr().err
    assert cli.main(["jobs", "cancel", "--queue", "mail", "--yes"]) == 0
    assert "cancel: 1 of 1 job(s)" in capsys.readouterr().out
    # Ids need no question; a scheduled job is cancelled as at once as a due one.
    assert cli.main(["jobs", "cancel", "3"]) == 0
    assert "cancel: 1 of 1 job(s)" in capsys.readouterr().out
    assert states(sql, table) == {1: State.IDLE, 2: State.CANCELLED, 3: State.CANCELLED}
    assert cli.main(["jobs", "cancel", "3"]) == EXIT_NO
    said = "cancel: nothing changed: job 3 is cancelled; this applies to pending jobs only"
    assert capsys.readouterr().out.strip() == said

    run_all()
    assert [p for p, _ in jobs_app.RUNS] == ["1"]
    assert cli.main(["jobs", "list", "--state", "cancelled"]) == 0
    assert "2 job(s), all cancelled" in capsys.readouterr().out
    assert cli.main(["jobs", "show", "3"]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 5}
    assert [c.strip() for c in rows["default"].split("│")[2:10]] == ["0", "0", "0", "0", "0", "1", "0", "1"]

    # A cancelled job can be replayed (pending again) or discarded.
    assert cli.main(["jobs", "replay", "3", "--yes"]) == 0
    assert "replay: 1 of 1 job(s)" in capsys.readouterr().out
    assert cli.main(["jobs", "discard", "2", "--yes"]) == 0
    assert states(sql, table) == {1: State.DONE, 3: State.IDLE}
