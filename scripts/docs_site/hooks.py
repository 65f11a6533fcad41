"""MkDocs hooks (mkdocs.yml ``hooks:``): the pages generated from the code at build.

The reference (settings, metrics, command line, REST API) is written from the
code each time the site is built, and the benchmarks page from
benchmarks/README.md, so none of them is committed text that could drift. The
code documented is this checkout's ``src``, whatever inferd is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _path in (ROOT / "src", HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import ref_api  # noqa: E402
import ref_cli  # noqa: E402
import ref_metrics  # noqa: E402
import ref_settings  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402

BENCHMARKS = ROOT / "benchmarks" / "README.md"
# benchmarks/README.md links into the docs as ../docs/PAGE.md (right on GitHub too).
_DOCS_LINK = re.compile(r"\]\(\.\./docs/")
_README_LINK = re.compile(r"\]\(\.\./README\.md\)")


def benchmarks_page() -> str:
    text = BENCHMARKS.read_text(encoding="utf-8")
    text = _DOCS_LINK.sub("](", text)
    return _README_LINK.sub("](index.md)", text)


def generated_pages() -> dict[str, str]:
    """Site path -> content of every page written at build."""
    return {
        "reference/settings.md": ref_settings.page(),
        "reference/metrics.md": ref_metrics.page(),
        "reference/cli.md": ref_cli.page(),
        "reference/rest-api.md": ref_api.page(),
        "reference/openapi.json": ref_api.openapi_json(),
        "benchmarks.md": benchmarks_page(),
    }


def on_files(files: Files, config: Any) -> Files:
    for path, content in generated_pages().items():
        files.append(File.generated(config, path, content=content))
    return files
