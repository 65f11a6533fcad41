"""Which lines of an old README are in no docs page: the check that moving the README's
sections into docs/ lost nothing, and a help when a branch that added to the old README
is merged.

    python scripts/docs_site/readme_moved.py 91fb80b      # the README at that revision

Prints every non-blank line of the old README (headings aside) that no docs/*.md page
or the README holds, links ignored (their targets changed when the sections moved).
Exit status 1 when some are missing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _normal(line: str) -> str:
    return re.sub(r"\]\([^)]*\)", "]()", line).strip()


def missing_lines(old_readme: str) -> list[tuple[int, str]]:
    pages = [*sorted((ROOT / "docs").glob("**/*.md")), ROOT / "README.md"]
    held = {_normal(line) for page in pages for line in page.read_text().splitlines()}
    return [
        (number, line)
        for number, line in enumerate(old_readme.splitlines(), 1)
        if line.strip() and not line.startswith("#") and _normal(line) not in held
    ]


def main(revision: str) -> int:
    old = subprocess.run(
        ["git", "show", f"{revision}:README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    missing = missing_lines(old)
    for number, line in missing:
        print(f"README.md:{number}: {line}")
    print(f"{len(missing)} of {len(old.splitlines())} lines are in no page")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "HEAD"))
