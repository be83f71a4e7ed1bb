"""The `duecast` command: `commands.main` parses the command line and hands each command to its module
(jobs, topics, status); every command ends a failure it understands in one line (shared.process.failures)."""

# The repository's top-level cli/ is installed as `duecast.cli` (pyproject.toml, package-dir).
# Loaded bare from a checkout it would be a second copy of every module, with its own classes.
if __name__ != "duecast.cli":
    raise ImportError(f"cli/ is part of the duecast package: import duecast.cli,"
                      f" not {__name__}")

from .commands import main

__all__ = ["main"]
