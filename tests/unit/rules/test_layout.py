"""The tree tools can read (issue 22): the repository's root is the package `duecast` (pyproject.toml's
package-dir), every import inside its parts is relative, no part loads under its bare name, and no
symbolic link stands in for a folder.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PARTS = ("shared", "worker", "dispatcher", "cli", "integrations")
PACKAGED = (*PARTS, "examples")


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_dirs() -> dict[str, str]:
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    return dict(tool["setuptools"]["package-dir"])


@pytest.mark.parametrize("name", PACKAGED)
def test_a_part_imported_by_its_bare_name_fails_loudly(name: str) -> None:
    # The repository root is on sys.path for pytest's default import mode and any script run there:
    # `import shared` must not quietly load a second copy of duecast.shared.
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    assert f"import duecast.{name}" in proc.stderr.strip().splitlines()[-1]


def test_the_package_resolves_to_the_top_level_folders() -> None:
    assert Path(importlib.import_module("duecast").__file__ or "").resolve() == ROOT / "__init__.py"
    for folder in PACKAGED:
        module = importlib.import_module(f"duecast.{folder}")
        assert Path(module.__file__ or "").resolve() == ROOT / folder / "__init__.py"


def test_every_package_folder_is_listed_in_pyproject() -> None:
    assert _package_dirs() == {"duecast": "."}
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    listed = set(tool["setuptools"]["packages"])
    found = {"duecast"}
    for part in PACKAGED:
        for init in (ROOT / part).rglob("__init__.py"):
            # A package only if every folder above it is one: examples/django_shop/shop is an app
            # to copy (its folder has no __init__.py), not a part of duecast.
            chain = init.parent.relative_to(ROOT).parts
            packaged = all((ROOT.joinpath(*chain[:i]) / "__init__.py").exists() for i in range(1, len(chain)))
            if "__pycache__" not in init.parts and packaged:
                found.add(".".join(("duecast", *chain)))
    assert found == listed, f"pyproject.toml's packages differ from the folders: {sorted(found ^ listed)}"


def test_no_symbolic_links_are_tracked() -> None:
    out = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True)
    links = [line.split("\t", 1)[1] for line in out.stdout.splitlines() if line.startswith("120000")]
    assert links == []


def _absolute_product_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno} {n}"
            for n in names
            if n == "duecast" or n.startswith("duecast.")
        ]
    return found


def test_imports_inside_the_parts_are_relative() -> None:
    # An absolute `duecast.shared...` names a folder that does not exist in the checkout: grep, IDEs
    # and drawings of the imports cannot follow it. The public face (./__init__.py) and the example
    # handlers (written as a user writes them) import the public API by its name.
    offenders = []
    for part in PARTS:
        for path in sorted((ROOT / part).rglob("*.py")):
            offenders += _absolute_product_imports(path)
    assert offenders == []


def test_roles_never_import_each_other_and_shared_imports_no_role() -> None:
    forbidden = {
        "shared": ("worker", "dispatcher", "cli"),
        "worker": ("dispatcher", "cli"),
        "dispatcher": ("worker", "cli"),
    }
    offenders = []
    for part, others in forbidden.items():
        for path in sorted((ROOT / part).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.ImportFrom) and node.level > 0):
                    continue
                if node.level != len(path.relative_to(ROOT).parts):
                    continue  # does not climb to the package root: stays inside its own part
                head = (node.module or "").split(".")[0]
                if head in others:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} -> {head}")
    assert offenders == []


def test_test_modules_are_named_from_tests_down_and_loaded_once() -> None:
    # tests/naming.py: the root is a package, yet a test helper must not load twice under two names.
    assert __name__ == "tests.unit.rules.test_layout"
    conftest = ROOT / "tests" / "conftest.py"
    copies = [
        name
        for name, module in list(sys.modules.items())
        if getattr(module, "__file__", None) and Path(module.__file__).resolve() == conftest
    ]
    assert copies == ["tests.conftest"]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_of(path: Path, known: set[str]) -> set[str]:
    """The product modules `path` imports (relative imports, TYPE_CHECKING ones too), by dotted name."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.ImportFrom) and node.level > 0):
            continue
        base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
        for alias in node.names:
            for candidate in (".".join([*base, alias.name]), ".".join(base)):
                if candidate in known:
                    found.add(candidate)
                    break
    return found


def test_no_two_modules_import_each_other_round_a_circle() -> None:
    # A circle (even one only a type checker follows) makes two modules one unit that neither side
    # can be read or tested without: name what one needs of the other as a Protocol instead.
    paths = [p for part in PACKAGED for p in (ROOT / part).rglob("*.py") if "__pycache__" not in p.parts]
    known = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imports_of(p, known) - {_module_name(p)} for p in paths}
    packages = {_module_name(p) for p in paths if p.name == "__init__.py"}
    circles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node] - packages):  # a package's face re-exports; it is no room
            if state.get(nxt) == 1:
                circles.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state and start not in packages:
            visit(start, [start])
    assert circles == []
