"""MLServer's ``mlserver.logging.logger``: the logger runtimes write to."""

from __future__ import annotations

import logging

logger = logging.getLogger("mlserver")

__all__ = ["logger"]
