"""Helpers shared by test_bad_settings.py and test_bad_settings_tls.py."""

from __future__ import annotations

import traceback
from pathlib import Path

SECRET = "pw-SECRET-6d1f0a"  # must never appear in any error, log line or repr


def everything_printed(exc: BaseException) -> str:
    """What a log line, a traceback or the CLI could show of `exc`, its causes included."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    # Not ValidationError.errors() / .json(): those hold the raw input by design (docs/security.md).
    return "\n".join(parts)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
