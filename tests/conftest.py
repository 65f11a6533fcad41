"""Fixtures every test tier shares."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Async tests (``@pytest.mark.anyio``) run on asyncio, the loop inferd serves on.
    Session-wide, so async fixtures of any scope (a module's worker pool) can use it."""
    return "asyncio"
