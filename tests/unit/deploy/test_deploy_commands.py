"""Every duecast command line in the deploy files and README parses, and parsing runs no role."""

from __future__ import annotations

import importlib.util
import re
import threading
from typing import Any

import pytest

from duecast.cli import commands as cli
from tests.unit.deploy.deploy_support import (
    DEPLOY,
    containers,
    duecast_services,
    workloads,
)

# -- commands, files and modules exist ----------------------------------------------------------------


class Parsed(BaseException):
    """Raised where a command would start working: its arguments parsed. A BaseException, so it
    passes through the commands' failure handling (shared/process/failures.py), as Ctrl-C would."""


def _stop_after_parsing(*_args: Any, **_kwargs: Any) -> Any:
    raise Parsed


def assert_command_parses(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, *, app_exists: bool = True
) -> None:
    """Run argv through duecast.cli.commands and the role's own argparse parser, stopping before any I/O;
    with `app_exists`, an --app module must be importable too."""
    assert argv[0] in cli.COMMANDS, f"`duecast {argv[0]}` is not a subcommand ({', '.join(cli.COMMANDS)})"
    monkeypatch.setattr("duecast.dispatcher.main.start_process", _stop_after_parsing)
    monkeypatch.setattr("duecast.worker.main.start_process", _stop_after_parsing)
    monkeypatch.setattr("duecast.cli.commands.load_settings", _stop_after_parsing)
    monkeypatch.setattr("duecast.cli.web.serve.load_settings", _stop_after_parsing)
    try:
        cli.main(argv)
    except Parsed:
        pass
    except SystemExit as exc:
        pytest.fail(f"`duecast {' '.join(argv)}` does not parse (exit {exc.code})")
    else:
        pytest.fail(f"`duecast {' '.join(argv)}` returned before parsing its arguments")
    for i, arg in enumerate(argv[:-1]):
        if arg == "--app" and app_exists:
            module = argv[i + 1].partition(":")[0]
            assert importlib.util.find_spec(module) is not None, f"--app {module}: no such module"


def command_lines() -> list[tuple[str, list[str]]]:
    """Every `duecast` argv in deploy/: compose commands, k8s container args (the image's entrypoint is
    duecast), and the `duecast ...` lines of the README's code blocks."""
    lines = [(f"compose:{n}", list(s["command"])) for n, s in duecast_services().items()]
    lines += [(f"k8s:{o['metadata']['name']}", list(c["args"])) for o in workloads() for c in containers(o)]
    readme = (DEPLOY / "README.md").read_text()
    for block in re.findall(r"```(?:sh|console|bash)?\n(.*?)```", readme, flags=re.S):
        for line in block.splitlines():
            m = re.match(r"\s*(?:\$\s*)?duecast\s+(.*?)\s*(?:#.*)?$", line)
            if m:
                lines.append(("README", m.group(1).split()))
    return lines


def test_the_readme_shows_commands() -> None:
    assert any(where == "README" for where, _ in command_lines())


@pytest.mark.parametrize(
    ("where", "argv"), command_lines(), ids=lambda v: v if isinstance(v, str) else " ".join(v)
)
def test_every_duecast_command_line_parses(
    where: str, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README's examples name the reader's own app (myapp.handlers); the files run the demo's.
    assert_command_parses(argv, monkeypatch, app_exists=where != "README")


def test_the_parse_check_catches_a_bad_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.fail.Exception, match="does not parse"):
        assert_command_parses(
            ["worker", "--app", "duecast.examples.block_check", "--no-such-flag"], monkeypatch
        )
    with pytest.raises(AssertionError, match="not a subcommand"):
        assert_command_parses(["dispatch"], monkeypatch)


def test_parsing_runs_no_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse check must stop before any role starts (no thread, no connection)."""
    before = threading.active_count()
    assert_command_parses(["dispatcher"], monkeypatch)
    assert threading.active_count() == before
