"""MLServer's ``mlserver.settings``: inferd's settings classes, which read the same
files with the same field names."""

from __future__ import annotations

from inferd.settings import MetadataTensorSettings, ModelParameters, ModelSettings
from inferd.settings import ServerSettings as Settings

__all__ = ["MetadataTensorSettings", "ModelParameters", "ModelSettings", "Settings"]
