"""Fenced code blocks of a Markdown page, with the HTML comment (if any) on the line before each.

The docs' convention (README.md, "Code blocks in these docs"): a block a test does not run carries
`<!-- excerpt -->` (optionally `<!-- excerpt: why -->`) on the line just before its fence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w*)[^\n]*$")
COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    note: str  # the HTML comment on the line before the fence, without <!-- -->; "" if none

    @property
    def excerpt(self) -> bool:
        return self.note == "excerpt" or self.note.startswith("excerpt:")

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of `path`, top to bottom (fences are not nested in our docs)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"{path}:{i + 1}: a fence that is never closed"
        before = lines[i - 1].strip() if i else ""
        comment = COMMENT.match(before)
        found.append(
            Block(
                path,
                i + 1,
                opening.group(1),
                "\n".join(lines[i + 1 : end]) + "\n",
                comment.group(1) if comment else "",
            )
        )
        i = end + 1
    return found
