"""MLServer's Python API, for MLServer custom runtimes served by inferd.

When MLServer itself is not installed, ``import mlserver`` (and ``mlserver.types``,
``mlserver.codecs``, ...) resolves to this package (see
:mod:`inferd.compat.importer`), so a model folder written for MLServer 1.7 is
served unchanged. An installed MLServer is never shadowed.
"""

from __future__ import annotations

from inferd.compat.mlserver.metrics import log, register
from inferd.compat.mlserver.model import MLModel
from inferd.compat.mlserver.settings import ModelSettings, Settings

__version__ = "1.7.1"

__all__ = ["MLModel", "ModelSettings", "Settings", "__version__", "log", "register"]
