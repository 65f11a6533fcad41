"""What the response cache saves: inferd with the cache on (every request a hit)
vs off, on the iris model, in one run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..repository import write_sklearn_model
from ..servers import BASELINE_SUFFIX, INFERD, Contender, baseline_pairs
from .base import Case
from .rest import Rest

CACHE_ON, CACHE_OFF = "cache-on", "cache-off"


class Cache(Rest):
    name = "cache"
    description = """The response cache: the rest scenario, inferd only, cache on vs off.

Each round runs inferd twice on the same iris model and load: with cache_enabled
in settings.json and the model's model-settings.json (wrk sends one request body
over and over, so after the first every request is answered from the cache), and
without. The ratio is what a hit costs against running the model: the issue asks
for a cached answer at under half the cost, i.e. cache-on/cache-off req/s > 2."""
    compares_mlserver = False

    def contenders(self) -> list[Contender]:
        return [
            Contender(CACHE_ON, INFERD, {"cache_enabled": True}),
            Contender(CACHE_OFF, INFERD),
        ]

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        tree_pairs = [(CACHE_ON + tree, CACHE_OFF + tree) for tree in ("", BASELINE_SUFFIX)]
        return [p for p in tree_pairs if set(p) <= set(labels)] + baseline_pairs(labels)

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        fields = {"cache_enabled": True} if contender.label.startswith(CACHE_ON) else {}
        write_sklearn_model(repo, self.model, self.estimator, fields=fields)
