"""A read-only server (MariaDB/MySQL 1290 `--read-only`, 1836) is a condition that passes, for a
running role: one WARNING line naming it, no traceback, and the loop backs off and goes on (issue
24.7: each failed tick was an ERROR with its traceback, 846 lines in 20 s). A one-shot command says
so in one line, exit 3. The writers' contract is unchanged: StorageError 1290, not retried."""

from __future__ import annotations

import logging
import threading

import pymysql
import pytest

from duecast.shared.process.failures import EXIT_UNAVAILABLE, explain
from duecast.shared.process.loop import Tick, run
from duecast.shared.storage.units import StorageError, is_transient, translate

READ_ONLY = {
    1290: "The MariaDB server is running with the --read-only option so it cannot execute this statement",
    1836: "Running in read-only mode",
}


def refused(code: int) -> Exception:
    driver = pymysql.err.OperationalError(code, READ_ONLY[code])
    try:
        raise translate(driver) from driver  # as the storage layer raises it
    except Exception as mine:
        return mine


class ReadOnlyRole:
    name = "dispatcher"

    def __init__(self, code: int, fails: int) -> None:
        self.code, self.fails = code, fails

    def tick(self) -> Tick:
        if self.fails:
            self.fails -= 1
            raise refused(self.code)
        return Tick(0.0, idle=True)


@pytest.mark.parametrize("code", sorted(READ_ONLY))
def test_a_role_logs_a_read_only_server_as_one_warning_line_and_carries_on(
    code: int, caplog: pytest.LogCaptureFixture
) -> None:
    role = ReadOnlyRole(code, fails=3)
    with caplog.at_level(logging.DEBUG, "duecast.loop"):
        run(role, threading.Event(), drain=True, error_base_s=0.001, error_cap_s=0.001)
    assert role.fails == 0  # it went on after each failure, and its last tick ran
    said = [r for r in caplog.records if r.name == "duecast.loop"]
    assert [r.levelno for r in said] == [logging.WARNING] * 3
    assert all(r.exc_info is None for r in said)  # no traceback
    assert f"StorageError: ({code}, " in said[0].getMessage()


def test_a_command_says_the_server_is_read_only_in_one_line_exit_3() -> None:
    problem = explain(refused(1290))
    assert problem is not None
    assert problem.code == EXIT_UNAVAILABLE
    assert "the server is read-only (1290" in str(problem)
    assert "\n" not in str(problem)


def test_the_writers_contract_is_unchanged_a_storage_error_not_retried() -> None:
    mine = refused(1290)
    assert isinstance(mine, StorageError)
    assert not is_transient(mine)
