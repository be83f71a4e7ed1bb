"""The transport port (issue 22.3): only shared/fanout imports redis; the roles program against the
Queue protocol (shared/fanout/protocol.py), never the Redis-backed class or the client, outside their
wiring (main.py); no except clause in a role names a redis-py error.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PARTS = ("shared", "worker", "dispatcher", "cli")
ROLES = ("worker", "dispatcher")
WIRING = {"main.py"}  # a role's main builds the queue (and hands its client to an Enqueuer)


def _modules(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, relative ones as written after their dots (`fanout.queue`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_only_the_redis_side_imports_redis() -> None:
    importers = [
        str(p.relative_to(ROOT))
        for p in _modules(*PARTS)
        if any(m == "redis" or m.startswith("redis.") for m in _imports(p))
    ]
    assert importers
    assert [p for p in importers if not p.startswith("shared/fanout/")] == []


def test_the_roles_see_the_queue_port_only() -> None:
    concrete = ("fanout.queue", "fanout.client", "fanout.retype")
    offenders = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in _modules(*ROLES)
        if p.name not in WIRING
        for m in _imports(p)
        if m.endswith(concrete)
    ]
    assert offenders == []


def test_no_role_catches_a_redis_py_error() -> None:
    offenders = []
    for path in _modules(*ROLES):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                caught = ast.unparse(node.type)
                if "redis" in caught.lower():
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: except {caught}")
    assert offenders == []
