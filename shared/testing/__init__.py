"""Test helpers for users' own test suites, no servers needed: an in-memory stand-in for the Enqueuer
that runs tasks as a worker would (inline, or on `drain()` with a clock of its own), and calls of a
row or batch handler as the worker makes them. Public as `duecast.testing` (docs/testing.md)."""

# Installed as `duecast.shared.testing` (pyproject.toml); loaded bare it would be a second copy.
if __name__ != "duecast.shared.testing":
    raise ImportError(
        f"shared/testing/ is part of the duecast package: import duecast.testing, not {__name__}"
    )
