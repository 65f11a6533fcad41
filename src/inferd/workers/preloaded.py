"""Runtimes loaded before this process was forked, waiting to be adopted.

A protocol process forked from the protocol fork parent
(supervisor/protocol_parent.py) finds here the models that parent loaded: the
in-process pool adopts one (no import, no load, only its warm-up) when its
settings are exactly those it is asked to load. Each is adopted once: a second
instance loads the model afresh in this process, and a request's load of it after an
unload or an eviction is placed in the model host (host/on_demand.py).

A model this process loads that was not loaded before the fork (not fork-safe) is a
copy of its own in every protocol process: that is logged once per model, with the
cost. A model loaded after the start otherwise runs in the model host.
"""

from __future__ import annotations

import logging

from inferd.model import Model
from inferd.observability.logs import SERVER_EVENT
from inferd.settings import ModelSettings

logger = logging.getLogger(__name__)

_models: list[Model] = []
# Whether this process was forked from a parent that preloads models.
_forked = False
_told: set[str] = set()


def offer(models: list[Model]) -> None:
    """In a process just forked: these runtimes are loaded already."""
    global _forked
    _forked = True
    _models[:] = models


def take(settings: ModelSettings) -> Model | None:
    """The runtime loaded before the fork with exactly ``settings``, once; None if none."""
    for model in _models:
        if model.settings == settings:
            _models.remove(model)
            return model
    if _forked and settings.label not in _told:
        _told.add(settings.label)
        logger.info(
            "The %s was not loaded before this protocol process was forked: it is loaded in "
            "each protocol process (one copy of its memory per process)",
            settings.label,
            extra=SERVER_EVENT,
        )
    return None
