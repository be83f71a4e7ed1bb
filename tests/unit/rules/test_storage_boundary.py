"""Storage is the only place a statement runs (issue 22): outside shared/storage/ (and the query
catalogs themselves, which are text), no module imports the query catalogs or the MySQL driver, asks
for or holds a cursor, or calls `execute`/`executemany`, except on a Redis pipeline. And the catalogs
are named statements: no renderer of hundreds of lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PARTS = ("shared", "worker", "dispatcher", "cli")
INSIDE = (ROOT / "shared" / "storage", ROOT / "shared" / "queries")
CATALOGS = ROOT / "shared" / "queries"
RUNS_STATEMENTS = {"execute", "executemany", "cursor"}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60  # the house limits (issue 22: modules, functions)


def _modules() -> Iterator[Path]:
    yield from sorted(ROOT.glob("*.py"))  # the package's face: __init__.py, __main__.py
    for part in PARTS:
        for path in sorted((ROOT / part).rglob("*.py")):
            if not any(path.is_relative_to(inside) for inside in INSIDE):
                yield path


def _imported(path: Path, node: ast.ImportFrom | ast.Import) -> Iterator[tuple[str, Path | None]]:
    """(the name as written, the file or folder it resolves to inside the repository, if any)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
        return
    if node.level == 0:
        yield node.module or "", None
        return
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    target = base.joinpath(*(node.module or "").split(".")) if node.module else base
    for alias in node.names:
        yield "." * node.level + ".".join(filter(None, (node.module, alias.name))), target / alias.name


def _is_catalog(name: str, where: Path | None) -> bool:
    if where is not None:
        return where.is_relative_to(CATALOGS)
    return ".shared.queries" in f".{name}" or name.startswith("shared.queries")


def _pipelines(scope: ast.AST) -> set[str]:
    """Names bound to `<redis client>.pipeline(...)` in a function: their `execute()` sends Redis
    commands, not SQL."""
    return {
        target.id
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "pipeline"
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _statement_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    enclosing: dict[int, ast.AST] = {}  # a node's id -> its innermost function (or the module)
    for scope in [tree, *functions]:
        for node in ast.walk(scope):
            if node is not scope:
                enclosing[id(node)] = scope  # inner functions come later in the walk and win
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in RUNS_STATEMENTS:
            continue
        receiver = node.func.value
        if isinstance(receiver, ast.Name) and receiver.id in _pipelines(enclosing[id(node)]):
            continue
        yield node.lineno, node.func.attr


def _offences(path: Path, source: str | None = None) -> list[str]:
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    where = path.relative_to(ROOT)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name, target in _imported(path, node):
                if name.split(".")[0] == "pymysql":
                    found.append(f"{where}:{node.lineno} imports the driver ({name})")
                elif _is_catalog(name, target):
                    found.append(f"{where}:{node.lineno} imports a query catalog ({name})")
                elif name.rsplit(".", 1)[-1] == "Cursor":
                    found.append(f"{where}:{node.lineno} imports a cursor type ({name})")
        # `with db.transaction() as cur`: a transaction's cursor in hand (Outbox.transaction(conn), the
        # caller's own transaction, yields nothing).
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if (
                    item.optional_vars is not None
                    and isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "transaction"
                ):
                    found.append(f"{where}:{node.lineno} holds a transaction's cursor")
    found += [f"{where}:{line} calls .{attr}()" for line, attr in sorted(_statement_calls(tree))]
    return found


def test_only_storage_runs_statements() -> None:
    offenders = [o for path in _modules() for o in _offences(path)]
    assert offenders == [], "\n".join(offenders)


def test_the_rule_sees_what_it_forbids() -> None:
    # The check above passes on an empty list: prove each part fires on a module that breaks it.
    source = (
        "from ..queries.jobs import render_jobs\n"
        "from .. import queries\n"
        "import pymysql.cursors\n"
        "from ..storage.units import Cursor\n"
        "def f(db, client):\n"
        "    with db.transaction() as cur, client.transaction(conn):\n"
        "        pass\n"
        "    with db.cursor() as cur:\n"
        "        cur.executemany('SELECT 1', [])\n"
        "    pipe = client.pipeline(transaction=False)\n"
        "    pipe.execute()  # Redis: allowed\n"
        "    db.execute('SELECT 1')\n"
    )
    where = "shared/monitor/probe.py"
    assert _offences(ROOT / where, source) == [
        f"{where}:1 imports a query catalog (..queries.jobs.render_jobs)",
        f"{where}:2 imports a query catalog (..queries)",
        f"{where}:3 imports the driver (pymysql.cursors)",
        f"{where}:4 imports a cursor type (..storage.units.Cursor)",
        f"{where}:6 holds a transaction's cursor",
        f"{where}:8 calls .cursor()",
        f"{where}:9 calls .executemany()",
        f"{where}:12 calls .execute()",
    ]


def test_the_query_catalogs_are_named_statements_not_long_renderers() -> None:
    # A catalog reads as a list of named statements: a renderer composes small families of them.
    too_long = []
    for path in sorted(CATALOGS.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(ROOT)
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.FunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{where}:{node.lineno} {node.name}: {lines} lines")
    assert too_long == []
