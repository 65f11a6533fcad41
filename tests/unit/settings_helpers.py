"""Writing settings files and reading the errors they cause, for the settings tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import ConfigurationError
from tests.support.models import MODEL_SETTINGS, write_model_folder


def write_server_settings(folder: Path, settings: dict[str, Any]) -> Path:
    (folder / "settings.json").write_text(json.dumps(settings))
    return folder


def write_model(folder: Path, settings: dict[str, Any]) -> Path:
    """``folder/model-settings.json`` holding exactly ``settings`` (no name added)."""
    write_model_folder(folder.parent, folder.name, **{"name": None, **settings})
    return folder / MODEL_SETTINGS


def config_error(call: Any, *args: Any) -> str:
    with pytest.raises(ConfigurationError) as raised:
        call(*args)
    return str(raised.value)
