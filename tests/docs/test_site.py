"""The documentation site builds with warnings as errors, its navigation holds every
page, the README stays a short front page that links into it, and every section of
the old README has a page."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from tests.docs.pages import DOCS, README, ROOT, build_site, code_blocks

README_MAX_LINES = 300
HEADINGS = Path(__file__).with_name("readme_headings.tsv")
GENERATED = {
    "reference/settings.md",
    "reference/metrics.md",
    "reference/cli.md",
    "reference/rest-api.md",
    "benchmarks.md",
}


def nav_pages() -> list[str]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def walk(entries: list) -> list[str]:
        found = []
        for entry in entries:
            for value in entry.values():
                found += walk(value) if isinstance(value, list) else [value]
        return found

    return walk(config["nav"])


def built_page(site: Path, page: str) -> Path:
    stem = page.removesuffix(".md")
    return site / "index.html" if stem == "index" else site / stem / "index.html"


def test_every_page_in_the_navigation_is_built(site: Path) -> None:
    pages = nav_pages()
    written = {str(path.relative_to(DOCS)) for path in DOCS.glob("**/*.md")}
    assert written | GENERATED == set(pages), "docs/*.md and mkdocs.yml's nav differ"
    for page in pages:
        html = built_page(site, page).read_text()
        assert 'class="md-nav' in html and "<h1" in html, page
    assert (site / "reference" / "openapi.json").stat().st_size > 10_000


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    """The strict build is what catches them: a copy of the docs with one bad link
    and one bad anchor does not build."""
    for broken in ("[gone](no-such-page.md)", "[gone](batching.md#no-such-anchor)"):
        docs = tmp_path / broken[7:12] / "docs"
        shutil.copytree(DOCS, docs)
        page = docs / "quickstart.md"
        page.write_text(page.read_text() + f"\nSee {broken}.\n")
        config = docs.parent / "mkdocs.yml"
        text = (ROOT / "mkdocs.yml").read_text()
        text = text.replace("docs_dir: docs", f"docs_dir: {docs}")
        text = text.replace("- scripts/docs_site/hooks.py", f"- {ROOT}/scripts/docs_site/hooks.py")
        # Paths relative to the checkout, made absolute for a config file elsewhere.
        for relative in ("src/inferd", "benchmarks/README.md", "scripts/docs_site"):
            text = text.replace(f"  - {relative}\n", f"  - {ROOT / relative}\n")
        config.write_text(text)
        built = build_site(tmp_path / "site", config)
        assert built.returncode != 0, broken
        assert broken[7:-1].split("#")[-1] in built.stderr, built.stderr[-3000:]


def test_the_readme_is_a_short_front_page_linking_into_the_docs() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    for link in local:
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"
    guides = [page for page in nav_pages() if page not in GENERATED and page != "index.md"]
    missing = [page for page in guides if f"docs/{page}" not in local]
    assert not missing, f"the README links to no {missing}"
    for heading in (
        "## Install",
        "## A first request",
        "## Moving from MLServer",
        "## Moving from Triton",
    ):
        assert heading in text.splitlines()


def test_every_section_of_the_old_readme_has_a_page() -> None:
    rows = [
        line.split("\t") for line in HEADINGS.read_text().splitlines() if not line.startswith("#")
    ]
    assert len(rows) == 61  # every heading of the old README (code comments aside)
    for old, page, heading in rows:
        lines = (DOCS / page).read_text().splitlines()
        headings = {re.sub(r"^#+ ", "", line) for line in lines if re.match(r"#{1,6} ", line)}
        assert heading in headings, f"{old!r} moved to {page} as {heading!r}, not there"


def test_code_blocks_are_read_with_their_marks_and_answers() -> None:
    text = (
        "<!-- quickstart-test: skip (serves until stopped) -->\n```bash\ninferd start m\n```\n"
        "\n```bash\ncurl -s x\n```\n\n```text\n{}\n```\n\nthen\n\n```python\nprint(1)\n```\n"
    )
    blocks = code_blocks(text)
    assert [(b.language, b.skip, b.shown) for b in blocks] == [
        ("bash", "serves until stopped", None),
        ("bash", None, "{}"),
        ("text", None, None),
        ("python", None, None),
    ]
