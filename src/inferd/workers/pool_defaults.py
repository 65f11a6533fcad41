"""What the pools that start process pools later (per environment, per forked model)
tell each one, whenever it starts: the same as the pools running already."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable

from inferd.workers.base import Control
from inferd.workers.pool import ProcessPool


class LaterPools:
    """The handler for instances a pool gives up on, and the latest control message
    of each type sent to every process (a log level set at run time)."""

    def __init__(self) -> None:
        self._failure_handler: Callable[[int, str], None] | None = None
        self._kept: dict[type, Control] = {}
        # Every pool made here, starting or running, until it is dropped: one still
        # starting is not among the caller's running pools yet, and is told too.
        self._made: weakref.WeakSet[ProcessPool] = weakref.WeakSet()

    def on_instance_failed(
        self, handler: Callable[[int, str], None], running: Iterable[ProcessPool]
    ) -> None:
        self._failure_handler = handler
        for pool in running:
            pool.on_instance_failed(handler)

    def control(self, message: Control, running: Iterable[ProcessPool]) -> None:
        """Send a message for every process to the ``running`` pools and to those made
        here that are still starting, and keep it."""
        self._kept[type(message)] = message
        told = list(running)
        told += [pool for pool in self._made if pool not in told]
        for pool in told:
            pool.control(message)

    def started(self, pool: ProcessPool) -> ProcessPool:
        """``pool``, told what the running pools were told."""
        if self._failure_handler is not None:
            pool.on_instance_failed(self._failure_handler)
        for message in self._kept.values():
            pool.control(message)
        self._made.add(pool)
        return pool
