"""The handler of bench/io_checks/capacity.py: README's HTTP check exactly as printed (its
`# myapp/handlers.py` block, read from README.md at import), with its PAGES pointed at the stub.

`--app readme_app` (bench/io_checks on PYTHONPATH). Nothing of the check is changed: its aiohttp
session (100 connections, aiohttp's default; a 5 s total timeout), its call, its ack.
"""

from __future__ import annotations

import os
import re
import types
from pathlib import Path

from http_bare import raise_open_files

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "# myapp/handlers.py\n"
URL_ENV = "DUECAST_BENCH_HTTP_URL"  # as http_app.URL_ENV


def readme_block() -> str:
    """README's python block that starts with MARK."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    (block,) = [b for b in blocks if b.startswith(MARK)]
    return block


raise_open_files()
app = types.ModuleType("myapp.handlers")
exec(compile(readme_block(), str(README), "exec"), app.__dict__)  # noqa: S102 (our own README)
app.PAGES = os.environ[URL_ENV]
handlers = app.handlers
