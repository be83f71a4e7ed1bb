"""The command-line conventions every `duecast` command and role follows: help that shows defaults,
`--config` accepted on every (sub)command, and times given as ISO 8601 or relative (`1h`, `2d`).
Parsing only; what a command does with its arguments is its own module's.
"""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta
from typing import Any, NoReturn

CONFIG_HELP = "TOML settings file (else DUECAST_CONFIG)"
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
TIME_FORMS = "an ISO 8601 time (2026-01-31, 2026-01-31T14:00) or a time ago: 30m, 1h, 2d, 1w"


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with each option's default after its help when it has one worth saying
    (not None, False or an empty list): ArgumentDefaultsHelpFormatter prints `(default: None)` too."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or default in (None, False, [], argparse.SUPPRESS)
            or action.option_strings == []
            or isinstance(action, argparse._HelpAction | argparse._VersionAction)
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line naming the command and where to read more, exit 2
    (docs/runbook.md#exit-codes), like every other failure of duecast's; its subparsers are too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} --help`\n")


def parser(prog: str, description: str, **kwargs: Any) -> Parser:
    """A command's parser: defaults in its help, and `--config` (also after a subcommand)."""
    out = Parser(prog=prog, description=description, formatter_class=HelpFormatter, **kwargs)
    add_config(out, top=True)
    return out


def add_config(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """`--config` on `p`. On a subcommand's parser its default is SUPPRESS, so a `--config` given
    before the subcommand (`duecast jobs --config f list`) is not reset by the subparser."""
    if top:
        p.add_argument("--config", help=CONFIG_HELP)
    else:
        p.add_argument("--config", help=CONFIG_HELP, default=argparse.SUPPRESS)


class Subcommands:
    """A parser's subcommands (`ACTION`, stored as `args.action`); each gets its help as its
    description, the defaults-showing help and `--config`."""

    def __init__(self, p: argparse.ArgumentParser) -> None:
        self._sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def add_parser(self, name: str, *, help: str) -> argparse.ArgumentParser:
        description = help[:1].upper() + help[1:] + "."
        child = self._sub.add_parser(name, help=help, description=description, formatter_class=HelpFormatter)
        add_config(child)
        return child


def subcommands(p: argparse.ArgumentParser) -> Subcommands:
    return Subcommands(p)


def time_arg(text: str) -> datetime | timedelta:
    """An argparse type for --since/--until: an ISO 8601 time, or a time ago (`90s`, `30m`, `1h`,
    `2d`, `1w`) returned as a timedelta, which the query subtracts from the database's NOW()."""
    relative = _RELATIVE.match(text)
    if relative:
        return timedelta(seconds=float(relative.group(1)) * _UNITS_S[relative.group(2)])
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: give {TIME_FORMS}") from None
