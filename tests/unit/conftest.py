"""Fixtures of the unit tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No INFERD_* / MLSERVER_* variables leak in from the machine running the tests."""
    for key in list(os.environ):
        if key.upper().startswith(("INFERD_", "MLSERVER_")):
            monkeypatch.delenv(key)
