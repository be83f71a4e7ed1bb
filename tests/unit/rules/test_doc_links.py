"""Every relative link in the repository's markdown resolves: the file exists and the anchor names a heading.

The tree moves (duecast/cli became cli/, the admin store went into shared/storage/admin): a link checker in
the unit suite makes a move that forgets the docs fail in CI instead of in a reader's browser.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# [text](target "title") and ![alt](target); the target has no spaces in our docs.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    """README.md, docs/**, deploy/, examples/**/README.md and every other tracked markdown file."""
    found = []
    for path in sorted(ROOT.rglob("*.md")):
        parts = path.relative_to(ROOT).parts
        if any(part.startswith(".") or part in {"node_modules", "build", "dist"} for part in parts):
            continue
        found.append(path)
    return found


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks (a link shown as code is not a link)."""
    lines, fence = [], ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.lstrip()
        marker = stripped[:3]
        if marker in ("```", "~~~"):
            fence = "" if fence == marker else (fence or marker)
            continue
        if not fence:
            lines.append((number, re.sub(r"`[^`]*`", "", line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading's anchor in a markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def targets(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(path):
        found += [(number, m.group(1)) for m in LINK.finditer(line)]
        reference = REFERENCE.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of the file whose file or heading is missing, as `file:line: target`."""
    problems = []
    for number, target in targets(path):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto: not checked here (no network in unit tests)
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor.lower() not in anchors(resolved):
            problems.append(f"{where} (no such heading)")
    return problems


def test_the_checked_files_include_the_docs_a_user_reads() -> None:
    names = {str(p.relative_to(ROOT)) for p in markdown_files()}
    for expected in (
        "README.md",
        "docs/observability.md",
        "deploy/README.md",
        "examples/blockcheck/README.md",
    ):
        assert expected in names


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken(path) == []


def test_the_checker_sees_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Start: A → B (one step)\n\n## Twice\n## Twice\n")
    page.write_text(
        "[ok](there.md#start-a--b-one-step) [ok](there.md#twice-1) [ok](#top)\n"
        "# Top\n"
        "[gone](moved.py) [bad](there.md#nowhere) `[code](not-a-link.md)` [web](https://x.invalid/)\n"
        "```\n[fenced](not-checked.md)\n```\n"
        "[ref]: ./also-gone.md\n"
    )
    assert broken(page, root=tmp_path) == [
        "page.md:3: moved.py (no such file)",
        "page.md:3: there.md#nowhere (no such heading)",
        "page.md:7: ./also-gone.md (no such file)",
    ]
