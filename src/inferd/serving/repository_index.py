"""The repository index (Triton's repository extension): what the registry serves,
plus the models on disk that are not loaded and the folders that cannot be read."""

from __future__ import annotations

import logging

from inferd.errors import ConfigurationError
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository, RepositoryScan
from inferd.types import ModelState, RepositoryEntry

logger = logging.getLogger(__name__)

# The index's reason for a model that is on disk but not loaded.
NOT_LOADED = "Not loaded (found in the model repository)"


def repository_index(
    registry: Registry, repository: ModelRepository, ready: bool | None = None
) -> list[RepositoryEntry]:
    """Every model in ``registry``, plus those in ``repository`` that are not loaded
    (``ready``: only those that are, or are not, ready)."""
    entries = registry.index()
    loaded = {entry.name for entry in entries}
    try:
        scan = repository.scan()
    except ConfigurationError as error:
        logger.warning("Repository index: %s", error)
        scan = RepositoryScan()
    for settings in scan.models:
        if settings.name not in loaded:
            entries.append(
                RepositoryEntry(settings.name, settings.version, ModelState.UNAVAILABLE, NOT_LOADED)
            )
    for broken in scan.broken:
        if broken.folder not in loaded:
            entries.append(
                RepositoryEntry(broken.folder, None, ModelState.UNAVAILABLE, broken.error)
            )
    if ready is not None:
        entries = [e for e in entries if (e.state is ModelState.READY) == ready]
    return sorted(entries, key=lambda e: (e.name, e.version or ""))
