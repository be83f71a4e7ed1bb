"""The `duecast` command: `commands.main` parses the command line and hands each command to its module
(jobs, topics, status); every command ends a failure it understands in one line (shared.process.failures)."""

from duecast.cli.commands import main

__all__ = ["main"]
