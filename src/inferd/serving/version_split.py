"""Requests that name no version, shared between a model's versions (``version_weights``).

The weights are read from the settings of the version such a request would reach
by default (the highest loaded): a canary's model-settings.json, loaded beside the
version it may replace, says how much of the traffic it takes. Only versions
that are READY take a share. With ``version_sticky_header`` the header's value,
not chance, picks the version, so one user (say) stays on one version while the
weights do not change.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping

from inferd.context import RequestContext
from inferd.errors import ModelNotFound
from inferd.serving.registry import Registry


class VersionSplit:
    def __init__(self, registry: Registry, chance: random.Random | None = None) -> None:
        self.registry = registry
        self._chance = chance or random.Random()

    def pick(self, name: str, context: RequestContext) -> str | None:
        """The version a request for ``name`` that names none goes to; None: the
        default one (no weights, or none of the weighted versions is ready)."""
        for found in self.registry.versions_of(name):
            if found.settings.version_weights:
                break
        else:
            return None  # what every request that names no version pays: ~0.4 us
        try:
            default = self.registry.find(name)
        except ModelNotFound:
            return None
        weights = default.settings.version_weights
        if not weights:
            return None
        ready = [
            (version, weights[version])
            for version in self.registry.ready_versions(name)
            if weights.get(version, 0) > 0
        ]
        if not ready:
            return None
        total = sum(weight for _, weight in ready)
        point = self._point(default.settings.version_sticky_header, context.headers, total)
        for version, weight in ready:
            point -= weight
            if point < 0:
                return version
        return ready[-1][0]

    def _point(self, header: str | None, headers: Mapping[str, str] | None, total: float) -> float:
        """Where in [0, total) the request falls: by its sticky header's value when it
        has one, else at random."""
        value = headers.get(header.lower()) if header and headers is not None else None
        if value is None:
            return self._chance.random() * total
        return zlib.crc32(value.encode()) / 2**32 * total
