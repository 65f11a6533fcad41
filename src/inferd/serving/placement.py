"""Which of the models a server is asked to load its own pool runs, when it is one of
several processes (``protocol_processes`` > 1; docs/design.md "The model host").

A protocol process runs in its own pool the models every process may hold a copy
of (supervisor/placement.py says which). The others it hands to the model host's
pool (workers/hosted.py): the coordinator has the host load such a model first,
starting the host if none runs yet. The model host runs exactly those others and
leaves the rest out. A lone server has no placement: its pool runs every model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inferd.settings import ModelSettings
from inferd.workers.base import Pool


@dataclass(frozen=True)
class Placement:
    """Where the models this server is asked to load run."""

    # Whether the server's own pool runs the model.
    here: Callable[[ModelSettings], bool]
    # The pool of a model not run here: the model host's, reached over its socket.
    # None: such a model is left out (the model host leaves out what the protocol
    # processes run).
    elsewhere: Pool | None = None

    def served(self, versions: list[ModelSettings]) -> list[ModelSettings]:
        """The versions this server serves, in its own pool or the host's."""
        if self.elsewhere is not None:
            return versions
        return [version for version in versions if self.here(version)]


def passed_through(settings: ModelSettings) -> ModelSettings:
    """A hosted version's settings for this process's scheduler: no batching and no
    sequences of its own, so each request goes to the host at once, where its one
    queue, batcher and sequence holder are."""
    return settings.model_copy(update={"max_batch_size": 1, "sequence_batching": None})
