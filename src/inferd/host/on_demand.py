"""The model host, started when a load first needs it.

With several protocol processes a model that no protocol process may copy
(host/placement.py ``why_not_replicated``) runs in the model host. The host starts
with the server when a model loaded at start needs it; otherwise none runs until
a load needs one: a repository API load (with or without a configuration
override) or a change the repository poll found. Before it applies such a load,
the coordinator asks :meth:`HostOnDemand.placement`, which reads the model's
settings as every process is about to (the same repository, the same override),
and when one of its versions must be hosted it has the supervisor start the host
(:meth:`HostOnDemand.start`) and waits until it answers ready. The host so
started loads no model of its own: it catches up on the coordinator's journal
(what was applied before it ran), and then the load that needed it reaches it
first, as every load does when a host runs; the protocol processes bind to it
after (host/client.py connects when a load first needs the host).

A model loaded after the start runs in the host too, whatever its settings
(:meth:`HostOnDemand.placement`, host/placement.py ``LOADED_LATER``): only the models
loaded at start are shared copy-on-write by the protocol processes (the fork parent
loaded them before forking); loaded later in each process, a model would cost a
copy per process. The one exception is a request's first load of a model the fork
parent loaded (load_on_request): each process adopts the parent's copy, shared. A
copy is adopted once (workers/preloaded.py), so the next load on request of that
model (after an eviction or an unload) runs in the host too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from inferd.errors import ConfigurationError, ErrorCode, InferdError
from inferd.host.placement import LOADED_LATER, why_not_replicated
from inferd.serving.repository import ModelRepository
from inferd.settings import ServerSettings
from inferd.triton.override import apply_override

logger = logging.getLogger(__name__)


class HostUnavailable(InferdError, code=ErrorCode.UNAVAILABLE):
    """The model host a load needs could not be started (the server is stopping, or
    it exited before it was ready)."""


class HostOnDemand:
    """Starts the model host (through ``start``, the supervisor's) for a load that needs it."""

    def __init__(
        self,
        settings: ServerSettings,
        start: Callable[[], Awaitable[None]],
        shared_at_start: frozenset[str] = frozenset(),
    ) -> None:
        """``shared_at_start``: the models the protocol fork parent loaded at start
        (those the placement copies, when the processes are forked), whose first load
        on request each process adopts (shared)."""
        self._repository = ModelRepository(
            Path(settings.model_repository_root), loaded_later=not settings.load_models_at_startup
        )
        self._max_request_size = settings.max_request_size
        # As configured: which models are copied depends on what the user set.
        self._settings = settings
        self._shared_at_start = shared_at_start
        self._hosted: set[str] = set()  # the models placed in the host so far
        self._adopted: set[str] = set()  # the fork parent's copies adopted on request
        self._start = start
        self._starting: asyncio.Future[None] | None = None

    def placement(self, name: str, config: str | None, on_request: bool = False) -> str | None:
        """Why a load of ``name`` (with the override ``config``) after the start runs in
        the model host, once for every protocol process (logged once, here); None when
        each process loads it: a request's first load (``on_request``) of a model the
        fork parent holds, or settings that cannot be read (every process refuses that
        load and says why). A fork parent's copy is adopted once: a request's next load
        of it runs in the host. Reads the repository: call it in a thread."""
        try:
            found = self._repository.find(name)
            if config is not None:
                found = [apply_override(v, config, self._max_request_size) for v in found]
        except (ConfigurationError, InferdError):
            return None
        adoptable = on_request and name in self._shared_at_start
        adopted = adoptable and name not in self._hosted and name not in self._adopted
        for version in found:
            reason = why_not_replicated(version, self._settings)
            if reason is None and not adopted:
                reason = LOADED_LATER
            if reason is not None:
                logger.info(
                    "%s runs in the model host, once, for every protocol process: %s",
                    version.label[:1].upper() + version.label[1:],
                    reason,
                )
                self._hosted.add(name)  # each process binds it from now on, loaded again too
                return reason
        if adopted:
            self._adopted.add(name)
        return None

    async def start(self) -> None:
        """Start the host and wait until it is ready: once, however many loads ask at
        the same time; HostUnavailable when it could not be (the next load tries again)."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        starting = self._starting
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self._starting is starting:
                self._starting = None
            raise HostUnavailable(f"The model host could not be started: {error}") from error
