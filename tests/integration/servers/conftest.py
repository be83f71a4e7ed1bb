"""Fixtures the servers tests share: the throwaway CA that signs the private TLS servers' certificates."""

from __future__ import annotations

import pytest

from tests.integration.tls_servers import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))
