"""Helpers shared by test_settings.py and test_settings_identifiers.py."""

from __future__ import annotations

from typing import Any

from duecast.shared.settings import SourceSettings

USERS = {"name": "users", "table": "users", "due_column": "updated_time", "period_s": 10}


def _source(**overrides: Any) -> SourceSettings:
    return SourceSettings(**{**USERS, **overrides})
