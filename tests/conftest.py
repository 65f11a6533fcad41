"""Fixtures every test tier shares."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

WriteModels = Callable[[Path], Path]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Async tests (``@pytest.mark.anyio``) run on asyncio, the loop inferd serves on.
    Session-wide, so async fixtures of any scope (a module's worker pool) can use it."""
    return "asyncio"


@pytest.fixture
def repository(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """This test's model repository, ``tmp_path/models``, as ``write_models(repository)``
    of its module (else of its folder's conftest.py) writes it; empty without one.

    The one ``repository`` fixture: a module says what its repository holds by
    defining ``write_models``, and a server that lives for a whole module writes its
    own folder with the same function (tests/support/models.py writes the folders)."""
    root = tmp_path / "models"
    root.mkdir()
    write = models_writer(request.module)
    return write(root) if write is not None else root


def models_writer(module: ModuleType) -> WriteModels | None:
    conftest = sys.modules.get(f"{module.__package__}.conftest")
    for source in (module, conftest):
        write = getattr(source, "write_models", None)
        if write is not None:
            return write
    return None


# pytest's exit status, kept for pytest_unconfigure.
_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave with pytest's status once everything has reported, without the
    interpreter's finalization: with torch and the native threads the suite's
    libraries start, it crashed there once (SIGSEGV after the summary, in CI's run),
    turning a run's status into 139."""
    if _EXIT_STATUS:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
