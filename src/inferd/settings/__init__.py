"""Server and model settings: their fields, defaults and validation.

The names and defaults follow MLServer's ``settings.json`` and
``model-settings.json`` so an MLServer deployment is served unchanged. Each value
comes from, in order of precedence: for server settings, ``inferd start``'s flags
(:mod:`inferd.settings.command_line`); the environment (``INFERD_<NAME>``, then
MLServer's ``MLSERVER_<NAME>``; ``INFERD_MODEL_<NAME>`` / ``MLSERVER_MODEL_<NAME>``
for model settings), then the settings file, then the default. Reading the
files and turning validation errors into messages is in :mod:`inferd.settings.loader`;
this package and the loader are the only code that reads env vars and settings files.
"""

from inferd.settings.base import MODEL_SETTINGS_FILE, SERVER_SETTINGS_FILE
from inferd.settings.model import (
    MetadataTensorSettings,
    ModelParameters,
    ModelSettings,
    SequenceBatchingSettings,
)
from inferd.settings.server import CORSSettings, ServerSettings

__all__ = [
    "MODEL_SETTINGS_FILE",
    "SERVER_SETTINGS_FILE",
    "CORSSettings",
    "MetadataTensorSettings",
    "ModelParameters",
    "ModelSettings",
    "SequenceBatchingSettings",
    "ServerSettings",
]
