"""`duecast COMMAND --help` reads as help: a description for users (no module docstring's internal
notes, such as "Wiring for ..."), and `--config` explained under every command."""

from __future__ import annotations

import contextlib
import io

import pytest

from duecast.cli import commands as cli

COMMANDS = [
    "dispatcher",
    "worker",
    "sweeper",
    "migrate",
    "enqueue",
    "jobs",
    "topics",
    "status",
    "web",
    "demo",
]
INTERNAL = ("Wiring", "settings -> roles", "noqa", "must not")


def help_text(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_internal_notes_and_explains_config(command: str) -> None:
    text = help_text(command)
    for note in INTERNAL:
        assert note not in text, f"duecast {command} --help shows {note!r}:\n{text}"
    config = [line for line in text.splitlines() if line.strip().startswith("--config")]
    assert config, f"duecast {command} --help has no --config:\n{text}"
    assert config[0].split(maxsplit=2)[2:], f"duecast {command} --help: --config has no help text:\n{text}"


def test_every_command_is_checked() -> None:
    assert sorted(cli.COMMANDS) == sorted(COMMANDS)
