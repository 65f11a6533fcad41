"""The documentation's files, and its Markdown read the way the checks need it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Marks the code block below it as one the quick start's test does not run.
SKIP = re.compile(r"<!--\s*quickstart-test:\s*skip\s*\((.+)\)\s*-->")
_FENCE = re.compile(r"^(`{3,})(\S*)")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, its text, the line it starts on, why it is
    not run (None: it is), and the text block right after it (the answer it shows)."""

    language: str
    code: str
    line: int
    skip: str | None
    shown: str | None


def code_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    raw: list[tuple[str, str, int, str | None, int]] = []  # + the line after the fence
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, language = opening.groups()
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith(fence))
        before = next((line for line in reversed(lines[:index]) if line.strip()), "")
        marked = SKIP.search(before)
        code = "\n".join(lines[index + 1 : end])
        raw.append((language, code, index + 1, marked.group(1) if marked else None, end + 1))
        index = end + 1
    blocks = []
    for position, (language, code, line, skip, after) in enumerate(raw):
        shown = None
        following = raw[position + 1] if position + 1 < len(raw) else None
        between = lines[after : following[2] - 1] if following else []
        if following and following[0] == "text" and not any(part.strip() for part in between):
            shown = following[1]
        blocks.append(Block(language, code, line, skip, shown))
    return blocks


def build_site(
    destination: Path, config: Path = ROOT / "mkdocs.yml"
) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` (this checkout's) into ``destination``."""
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config)]
    return subprocess.run(
        [*command, "--site-dir", str(destination)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
