"""Fixtures the flow tests share: rescan, a rescan source named for tests.integration.apps."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration import apps
from tests.integration.conftest import Env
from tests.integration.flow.roles_helpers import MakeEnv


@pytest.fixture
def rescan(make_env: MakeEnv) -> Callable[..., Env]:
    return lambda rows=0, **kw: make_env("rescan", rows=rows, name=apps.RESCAN, **kw)
