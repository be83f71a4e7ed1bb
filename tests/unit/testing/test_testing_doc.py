"""docs/testing.md's promise: every Python block runs with no server reachable. Each block runs as
a reader runs the page (a fresh interpreter, after the page's earlier blocks), with duecast's
settings pointing at closed ports; a block opening with `# pkg/mod.py` is also that module."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.docblocks import Block, blocks

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "testing.md"
PYTHON = [b for b in blocks(PAGE) if b.lang == "python" and not b.excerpt]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket is


def test_the_page_has_blocks() -> None:
    assert len(PYTHON) >= 5


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: f"docs/testing.md:{b.line}")
def test_block_runs_with_no_server(block: Block, tmp_path: Path) -> None:
    for b in PYTHON:
        if match := re.match(r"# ([\w/]+\.py)\n", b.text):
            (tmp_path / match.group(1)).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / match.group(1)).write_text(b.text)
    earlier = [b.text for b in PYTHON if b.line < block.line]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUECAST_")}
    env.update(
        PYTHONPATH=f"{tmp_path}:{ROOT}",
        PYTHONDONTWRITEBYTECODE="1",
        DUECAST_MYSQL__HOST="127.0.0.1",
        DUECAST_MYSQL__PORT=str(closed_port()),
        DUECAST_REDIS__URL=f"redis://127.0.0.1:{closed_port()}/0",
    )
    done = subprocess.run(
        [sys.executable, "-c", "\n".join([*earlier, block.text])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"docs/testing.md:{block.line} failed:\n{done.stdout}\n{done.stderr}"
