"""constraints.txt, the pinned versions every install uses: it covers every package duecast and its
test and bench extras need, each pin is one pyproject.toml allows, the suite runs on exactly those
versions, and scripts/dev, the Dockerfile and so CI install with it (issue 17).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
CONSTRAINTS = ROOT / "constraints.txt"
EXTRAS = ("test", "bench")


def pins(text: str) -> dict[str, Version]:
    """name -> version of each `name==version` line; anything else but comments is refused."""
    found: dict[str, Version] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][^\s;#]*)", line)
        assert m, f"constraints.txt:{number}: not `name==version`: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in found, f"constraints.txt:{number}: {name} is pinned twice"
        found[name] = Version(m.group(2))
    return found


PINS = pins(CONSTRAINTS.read_text())


def needed() -> tuple[set[str], set[str]]:
    """Every distribution duecast[test,bench] needs here (markers evaluated), and every name any of
    them requires under any marker (a pin for another platform or Python is not stale)."""
    seen: dict[str, frozenset[str]] = {}
    mentioned: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [("duecast", frozenset(EXTRAS))]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if key in seen and extras <= seen[key]:
            continue
        seen[key] = seen.get(key, frozenset()) | extras
        for raw in md.distribution(name).requires or []:
            req = Requirement(raw)
            mentioned.add(canonicalize_name(req.name))
            envs = [{"extra": e} for e in extras or {""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return set(seen) - {"duecast"}, mentioned


def test_the_file_pins_something_and_pins_exactly() -> None:
    assert len(PINS) > 20
    with pytest.raises(AssertionError, match="not `name==version`"):
        pins("redis>=5.0\n")
    with pytest.raises(AssertionError, match="pinned twice"):
        pins("redis==5.0\nRedis==5.1\n")


def test_every_package_the_install_needs_is_pinned_and_no_pin_is_stale() -> None:
    installed, mentioned = needed()
    assert {"pymysql", "pytest", "matplotlib"} <= installed
    missing = sorted(installed - set(PINS))
    assert not missing, f"not in constraints.txt (refresh it: scripts/dev lock): {missing}"
    stale = sorted(set(PINS) - mentioned)
    assert not stale, f"pinned but needed by nothing (refresh it: scripts/dev lock): {stale}"


def test_each_direct_dependency_pin_is_allowed_by_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    direct = [*project["dependencies"], *(r for e in EXTRAS for r in project["optional-dependencies"][e])]
    for raw in direct:
        req = Requirement(raw)
        pin = PINS.get(canonicalize_name(req.name))
        assert pin is not None, f"{req.name} is not pinned"
        assert req.specifier.contains(pin, prereleases=True), f"{req.name}=={pin} is outside {req.specifier}"


def test_the_suite_runs_on_the_pinned_versions() -> None:
    """What was tested is what the Dockerfile builds: scripts/dev installed these very versions."""
    installed, _ = needed()
    wrong = {
        name: f"{md.version(name)} installed, {PINS[name]} pinned"
        for name in sorted(installed)
        if Version(md.version(name)) != PINS[name]
    }
    assert not wrong, f"this venv does not match constraints.txt (run scripts/dev once): {wrong}"


def test_scripts_dev_the_dockerfile_and_ci_install_with_it() -> None:
    dev = (ROOT / "scripts" / "dev").read_text()
    assert 'CONSTRAINTS="$ROOT/constraints.txt"' in dev
    assert 'pip install -q -e "$spec" -c "$CONSTRAINTS"' in dev  # spec: .[extras the command needs]
    assert 'test | shell) echo "test,bench"' in dev  # the suite runs with both extras
    # ...and reinstalls when the pins change, not only when pyproject.toml does.
    assert 'want="$(cat "$ROOT/pyproject.toml" "$CONSTRAINTS" | sha256sum' in dev
    header = re.findall(r'^    "(# .*)"$', dev.split("LOCK_HEADER=(", 1)[1].split(")", 1)[0], re.M)
    assert [h.replace("\\`", "`") for h in header] == CONSTRAINTS.read_text().splitlines()[: len(header)]
    docker = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY pyproject.toml README.md constraints.txt ./" in docker
    assert "pip wheel --no-cache-dir --wheel-dir /wheels --constraint constraints.txt ." in docker
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/dev test" in ci
    assert "scripts/wheel-smoke" in ci  # ...which installs the wheel with the pins too:
    assert '-c "$ROOT/constraints.txt"' in (ROOT / "scripts" / "wheel-smoke").read_text()
