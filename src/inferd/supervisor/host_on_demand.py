"""The model host, started when a load first needs it.

With several protocol processes a model that no protocol process may copy
(hosting_rules.py ``why_not_replicated``) runs in the model host. The host starts
with the server when a model loaded at start needs it; otherwise none runs until
a load needs one: a repository API load (with or without a configuration
override) or a change the repository poll found. Before it applies such a load,
the coordinator asks :meth:`HostOnDemand.needs_host`, which reads the model's
settings as every process is about to (the same repository, the same override),
and when one of its versions must be hosted it has the supervisor start the host
(:meth:`HostOnDemand.start`) and waits until it answers ready. The host so
started loads no model of its own: it catches up on the coordinator's journal
(what was applied before it ran), and then the load that needed it reaches it
first, as every load does when a host runs; the protocol processes bind to it
after (workers/host_client.py connects when a load first needs the host).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from inferd.errors import ConfigurationError, ErrorCode, InferdError
from inferd.serving.repository import ModelRepository
from inferd.settings import ServerSettings
from inferd.supervisor.hosting_rules import why_not_replicated
from inferd.triton.override import apply_override

logger = logging.getLogger(__name__)


class HostUnavailable(InferdError, code=ErrorCode.UNAVAILABLE):
    """The model host a load needs could not be started (the server is stopping, or
    it exited before it was ready)."""


class HostOnDemand:
    """Starts the model host (through ``start``, the supervisor's) for a load that needs it."""

    def __init__(self, settings: ServerSettings, start: Callable[[], Awaitable[None]]) -> None:
        self._repository = ModelRepository(
            Path(settings.model_repository_root), loaded_later=not settings.load_models_at_startup
        )
        self._max_request_size = settings.max_request_size
        # As configured: which models are copied depends on what the user set.
        self._settings = settings
        self._start = start
        self._starting: asyncio.Future[None] | None = None

    def needs_host(self, name: str, config: str | None) -> bool:
        """Whether a load of ``name`` (with the override ``config``) has a version only
        the host may run. Reads the repository: call it in a thread. False when its
        settings cannot be read: every process refuses that load and says why."""
        try:
            found = self._repository.find(name)
            if config is not None:
                found = [apply_override(v, config, self._max_request_size) for v in found]
        except (ConfigurationError, InferdError):
            return False
        for version in found:
            reason = why_not_replicated(version, self._settings)
            if reason is not None:
                logger.info("Starting the model host for %s: %s", version.label, reason)
                return True
        return False

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
