"""MLServer's ``mlserver.settings``: inferd's settings classes, which read the same
files with the same field names."""

from __future__ import annotations

from ...settings import MetadataTensorSettings, ModelParameters, ModelSettings
from ...settings import ServerSettings as Settings

__all__ = ["MetadataTensorSettings", "ModelParameters", "ModelSettings", "Settings"]
