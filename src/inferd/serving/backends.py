"""What answers a model version's requests behind the data plane: a backend, chosen
per version.

The registry keeps every version's state (loading, ready, unloading) and serves
the data plane's lookups; loading a version, answering it and unloading it are
its backend's. Two backends implement :class:`Backend`:

- this process's own (serving/local_backend.py): the version runs in this
  process's pool, reached through its dispatch (queue, batcher, sequences), its
  counts in the server's statistics, its answers in the response cache;
- the model host's (host/backend.py): with several protocol processes, a
  version that cannot be copied into each (host/placement.py) runs once,
  in the model host, and each of its requests goes there as it came, through a
  client of the host's socket: the host's queue, batcher, cache and counts are the
  model's.

A :class:`BackendChoice` says which serves a version; a lone server has none (its
own backend serves every model), and the model host's leaves out what the
protocol processes run.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from inferd.context import RequestContext
from inferd.observability.stats import ModelStats
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import Control, LoadedInstance

if TYPE_CHECKING:
    from inferd.dispatch.scheduler import Scheduler
    from inferd.serving.response_cache import VersionCache


class VersionCalls(Protocol):
    """How one loaded version answers: its infer and infer_stream."""

    def submit(
        self, request: InferenceRequest, context: RequestContext
    ) -> Awaitable[InferenceResponse]:
        """The response to ``request`` (infer)."""
        ...

    def stream(
        self, request: InferenceRequest, context: RequestContext
    ) -> AsyncGenerator[list[InferenceResponse], None]:
        """Its ``predict_stream`` responses, in lists of those ready together
        (infer_stream); closing it early stops the model's generator."""
        ...

    @property
    def busy(self) -> bool:
        """Whether a call or a stream is running (load_on_request evicts idle models)."""
        ...

    async def close(self) -> None:
        """Refuse new calls; return once those taken on have ended."""
        ...


@dataclass(slots=True)
class Opened:
    """A version a backend loaded: what it offers, how it answers, where it counts."""

    instance: LoadedInstance
    calls: VersionCalls
    # Its statistics; a hosted version's count nothing here (the host's are summed).
    stats: ModelStats
    cache: VersionCache | None = None
    # This process's dispatch of it (its queue depth is a metric); None: not here.
    scheduler: Scheduler | None = None


class Backend(Protocol):
    """Loads versions (each by an instance id the registry hands out), answers them
    through their :class:`VersionCalls` and unloads them."""

    # Where its versions run, for the log ("in the model host"; empty: here).
    where: str

    async def load(self, instance_id: int, settings: ModelSettings) -> Opened:
        """Load ``settings`` as ``instance_id``; raises why it cannot."""
        ...

    async def unload(self, instance_id: int) -> None:
        """Forget ``instance_id`` (its calls closed first); nothing if it never loaded."""
        ...

    def instances(self, instance_id: int, settings: ModelSettings) -> int:
        """How many workers hold it now (1 in process); 0 when none does."""
        ...

    def control(self, message: Control) -> None:
        """Deliver a feature's control message where its versions run."""
        ...

    async def close(self) -> None:
        """Let go of what it holds (a connection), once its versions are unloaded."""
        ...


@dataclass(frozen=True)
class BackendChoice:
    """Which backend serves each version, when this server is one of several processes."""

    # Whether this process's own backend serves the version.
    here: Callable[[ModelSettings], bool]
    # The backend of a version not served here (the model host's). None: such a
    # version is left out (the model host leaves out what the protocol processes run).
    elsewhere: Backend | None = None
    # Whether a version not served by this process's pool runs in this process itself
    # (an in-process pool beside the pool's workers): in the model host, a model
    # placed there because it was loaded after the start runs as a protocol process
    # would have run its copy. None: no such version.
    in_process: Callable[[ModelSettings], bool] | None = None

    def served(self, versions: list[ModelSettings]) -> list[ModelSettings]:
        """The versions this server serves, with one backend or another."""
        if self.elsewhere is not None:
            return versions
        in_process = self.in_process or (lambda _: False)
        return [version for version in versions if self.here(version) or in_process(version)]
