"""The built site in a real browser (headless Chromium, as tests/e2e/test_docs_browser.py
uses it): the quick start page draws its navigation and its code blocks, highlighted
and with their buttons (copy: Material's JavaScript ran), and a screenshot is not blank.

Set INFERD_DOCS_SCREENSHOTS to a folder to keep the screenshots and look at them.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from tests.docs.pages import DOCS, code_blocks
from tests.docs.test_site import nav_pages
from tests.e2e.test_docs_browser import CHROMIUM, FLAGS, Chromium

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="/usr/bin/chromium is absent: install it with `apt-get install -y chromium`",
    ),
    pytest.mark.timeout(300),
]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site_url(site: Path) -> Iterator[str]:
    """The built site served over HTTP on a free port, as a static host would."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    browser = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


def test_the_quick_start_renders_its_navigation_and_code(site_url: str, chromium: Chromium) -> None:
    blocks = code_blocks((DOCS / "quickstart.md").read_text())
    with chromium.open(f"{site_url}/quickstart/") as page:
        page.evaluate(
            f"waitFor(() => document.querySelectorAll('.md-code__nav').length >= {len(blocks)},"
            " 'the code blocks\\' buttons').then(() => true)"
        )
        links = page.evaluate(
            "[...document.querySelectorAll('.md-nav--primary .md-nav__link')]"
            ".map((link) => link.textContent.trim())"
        )
        active = page.evaluate(
            "document.querySelector('.md-nav--primary .md-nav__link--active').textContent.trim()"
        )
        code = page.evaluate(
            "[...document.querySelectorAll('.md-content pre > code')].map((code) => "
            "[code.querySelectorAll('span').length, code.getBoundingClientRect().height,"
            " getComputedStyle(code).fontFamily, code.closest('.highlight').className])"
        )
        title = page.evaluate("document.title")
    assert title.startswith("Quick start")
    assert active == "Quick start"
    for wanted in (
        "Serving your models",
        "Moving from Triton",
        "Using every core",
        "Settings",
        "Metrics",
        "Command line",
        "REST API",
        "Design",
    ):
        assert wanted in links, f"{wanted!r} not in the navigation: {links}"
    assert len(links) >= len(nav_pages())
    assert len(code) == len(blocks)
    for (spans, height, font, classes), block in zip(code, blocks, strict=True):
        assert height > 10, f"line {block.line}: the block is not drawn"
        assert "mono" in font.lower(), f"line {block.line}: {font}"
        assert f"language-{block.language}" in classes.split(), f"line {block.line}: {classes}"
        if "'" in block.code or "import" in block.code:  # strings, keywords: coloured
            assert spans > 0, f"line {block.line}: not highlighted"


@pytest.mark.parametrize("page", ["quickstart/", "reference/settings/"])
def test_the_page_is_drawn(site_url: str, tmp_path: Path, page: str) -> None:
    screenshot = tmp_path / "page.png"
    command = [
        str(CHROMIUM),
        *FLAGS,
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={screenshot}",
        "--virtual-time-budget=5000",
        f"{site_url}/{page}",
    ]
    subprocess.run(command, capture_output=True, timeout=120, check=True)
    keep = os.environ.get("INFERD_DOCS_SCREENSHOTS")
    if keep:
        shutil.copy(screenshot, Path(keep) / (page.strip("/").replace("/", "-") + ".png"))
    with Image.open(screenshot) as image:
        assert image.format == "PNG" and image.size == (1280, 2000)
        histogram = image.convert("L").histogram()
    # A blank page is one colour; a drawn one has the header bar, text and code blocks.
    drawn = sum(histogram[:240]) / sum(histogram)
    assert drawn > 0.05, f"only {drawn:.1%} of the screenshot is not white"
    assert sum(1 for count in histogram if count) > 50
