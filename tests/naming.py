"""pytest plugin (pyproject.toml: `-p tests.naming`): names test modules from tests/ down, as they import
each other (`from tests.integration.polling import ...`), although the repository's root is itself a
package (its __init__.py is duecast's face).

pytest names a file after the outermost folder above it that holds an __init__.py, which is the
checkout's root here: tests/conftest.py would load as `<checkout>.tests.conftest` and again as
`tests.conftest` when a test imports it, two modules with two random database names. This stops the
climb below the root. It wraps a private pytest function, so pytest is pinned in constraints.txt and
tests/unit/rules/test_layout.py fails loudly if the naming changes.
"""

from __future__ import annotations

from pathlib import Path

import _pytest.pathlib

ROOT = Path(__file__).resolve().parents[1]
_climb = _pytest.pathlib.resolve_package_path


def _package_below_root(path: Path) -> Path | None:
    found = _climb(path)
    if found is None or found.resolve() != ROOT:
        return found
    top = ROOT / Path(path).resolve().relative_to(ROOT).parts[0]
    return top if (top / "__init__.py").is_file() else None


_pytest.pathlib.resolve_package_path = _package_below_root
