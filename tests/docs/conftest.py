"""The documentation site, built once per test session for every check that reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.pages import build_site


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site's folder; the build failing (warnings are errors) fails the tests."""
    destination = tmp_path_factory.mktemp("site")
    built = build_site(destination)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-6000:]}"
    return destination
