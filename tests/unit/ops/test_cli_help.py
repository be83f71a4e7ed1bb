"""`duecast COMMAND --help` reads as help: a description for users (no module docstring's internal
notes, such as "Wiring for ..."), and `--config` explained under every command."""

from __future__ import annotations

import argparse
import contextlib
import io
from datetime import datetime, timedelta

import pytest

from duecast.cli import commands as cli
from duecast.shared.process import arguments
from duecast.shared.process.failures import EXIT_CONFIG, EXIT_OK

COMMANDS = [
    "dispatcher",
    "worker",
    "sweeper",
    "migrate",
    "enqueue",
    "jobs",
    "topics",
    "status",
    "pause",
    "resume",
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


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def parsers(command: str, monkeypatch: pytest.MonkeyPatch) -> list[argparse.ArgumentParser]:
    """The command's parser and each of its subcommands' (caught as the command parses its line)."""

    def caught(self: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        raise _Parsed(self)

    monkeypatch.setattr(arguments.Parser, "parse_args", caught)
    with pytest.raises(_Parsed) as parsed:
        cli.COMMANDS[command][0]([])
    top = parsed.value.parser
    subs = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return [top, *(p for s in subs for p in s.choices.values())]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help_every_subcommand_a_description_and_config(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for parser in parsers(command, monkeypatch):
        assert isinstance(parser, arguments.Parser), parser.prog
        assert parser.formatter_class is arguments.HelpFormatter, parser.prog
        assert parser.description, f"{parser.prog} has no description"
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{parser.prog} {action.option_strings or action.dest} has no help"
        assert "--config" in parser._option_string_actions, f"{parser.prog} takes no --config"


def test_help_shows_defaults_worth_showing() -> None:
    text = help_text("jobs")
    assert "(default:" not in text  # --config's default is None: nothing to show
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["jobs", "list", "--help"])
    assert "jobs to list at most (1-10000) (default: 50)" in " ".join(out.getvalue().split())
    assert "Jobs matching a filter, newest first." in out.getvalue()  # the sub-subcommand's description


@pytest.mark.parametrize(
    ("line", "config"),
    [
        (["jobs", "list", "--config", "after.toml"], "after.toml"),
        (["jobs", "--config", "before.toml", "list"], "before.toml"),
        (["jobs", "list"], None),
        (["topics", "status", "--config", "t.toml"], "t.toml"),
    ],
)
def test_config_is_taken_before_or_after_a_subcommand(
    line: list[str], config: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str | None] = []

    def load(path: str | None) -> None:
        seen.append(path)
        raise SystemExit(0)

    monkeypatch.setattr(f"duecast.cli.{line[0]}.load_settings", load)
    with pytest.raises(SystemExit):
        cli.COMMANDS[line[0]][0](line[1:])
    assert seen == [config]


def test_version_and_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out.startswith("duecast ")
    assert cli.main(["statsu"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "duecast: unknown command 'statsu'; did you mean `duecast status`? see `duecast --help`"
    ]
    assert cli.main(["--nosuch"]) == EXIT_CONFIG
    assert "unknown option '--nosuch'" in capsys.readouterr().err
    assert cli.main([]) == EXIT_CONFIG
    assert "usage: duecast COMMAND" in capsys.readouterr().err


def test_a_usage_error_is_one_line_naming_what_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.COMMANDS["jobs"][0](["list", "--since", "yesterday"])
    assert exit_.value.code == EXIT_CONFIG
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("duecast jobs list: argument --since: 'yesterday' is not a time")
    assert "ISO 8601" in line
    assert "1h" in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("1h", timedelta(hours=1)),
        ("2d", timedelta(days=2)),
        ("1.5h", timedelta(minutes=90)),
        ("1w", timedelta(weeks=1)),
        ("2026-01-31", datetime(2026, 1, 31)),
        ("2026-01-31T14:00", datetime(2026, 1, 31, 14)),
        ("2026-01-31 14:00:05", datetime(2026, 1, 31, 14, 0, 5)),
    ],
)
def test_times_are_iso_8601_or_a_time_ago(text: str, expected: object) -> None:
    assert arguments.time_arg(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "1y", "-1h", "h", ""])
def test_other_times_are_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"ISO 8601 .* 30m, 1h, 2d"):
        arguments.time_arg(text)
