"""Per-model-version dispatch from the main process to the pool.

One :class:`Scheduler` exists per loaded model version. It never has more
requests in flight than the pool can run at once for that instance (its
capacity: the free slots of the workers that hold it); past that, requests wait
in a FIFO. A request that finds a free slot and nobody waiting goes straight to
the pool, with no task, thread or queue in between. A finished request hands its
slot to the oldest waiter by starting that waiter's request itself, before it
goes on to answer its own client: a worker is not left idle for a trip round the
event loop. Which worker runs a request is the pool's choice (the least loaded
one that holds the model).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable

from .errors import ModelNotReady
from .types import InferenceRequest, InferenceResponse
from .workers.base import Pool

Started = Awaitable[InferenceResponse]


class Scheduler:
    def __init__(self, pool: Pool, instance_id: int) -> None:
        self._pool = pool
        self.instance_id = instance_id
        self._in_flight = 0
        # Waiting requests; each future gets the request's started prediction once a
        # slot has been reserved for it.
        self._waiting: deque[tuple[InferenceRequest, asyncio.Future[Started]]] = deque()
        self._closed = False
        self._drained: asyncio.Event | None = None
        pool.watch(instance_id, self._capacity_changed)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def submit(self, request: InferenceRequest) -> InferenceResponse:
        if self._closed:
            raise ModelNotReady("The model is being unloaded; retry the request")
        capacity = self._pool.capacity(self.instance_id)
        if not self._waiting and self._in_flight < capacity:
            self._in_flight += 1
            try:
                return await self._pool.predict(self.instance_id, request)
            finally:
                self._release_slot()
        if capacity == 0:
            # No worker can run it now; the pool answers with the reason.
            return await self._pool.predict(self.instance_id, request)
        started = await self._wait_for_slot(request)
        try:
            return await started
        finally:
            self._release_slot()

    async def close(self) -> None:
        """Stop taking requests; wait until those already submitted have finished."""
        self._closed = True
        if self._in_flight or self._waiting:
            self._drained = asyncio.Event()
            await self._drained.wait()

    async def _wait_for_slot(self, request: InferenceRequest) -> Started:
        slot: asyncio.Future[Started] = asyncio.get_running_loop().create_future()
        entry = (request, slot)
        self._waiting.append(entry)
        try:
            return await slot
        except asyncio.CancelledError:
            if slot.done() and not slot.cancelled():
                self._abandon(slot.result())  # started just as we were cancelled
            else:
                with contextlib.suppress(ValueError):  # already skipped by a hand-out
                    self._waiting.remove(entry)
                self._notify_if_drained()
            raise

    def _abandon(self, started: Started) -> None:
        """Free the slot of a started request nobody waits for, once it is done."""
        if isinstance(started, asyncio.Future):
            started.add_done_callback(self._release_when_done)
            return
        if asyncio.iscoroutine(started):
            started.close()  # never ran: its slot is free now
        self._release_slot()

    def _release_when_done(self, started: asyncio.Future[InferenceResponse]) -> None:
        if not started.cancelled():
            started.exception()  # retrieved: nobody is left to see it
        self._release_slot()

    def _release_slot(self) -> None:
        self._in_flight -= 1
        if self._waiting:
            self._hand_out_slots()
        else:
            self._notify_if_drained()

    def _hand_out_slots(self) -> None:
        capacity = self._pool.capacity(self.instance_id)
        if capacity == 0:
            # Nothing will free a slot: let every waiter through to get the pool's error.
            capacity = self._in_flight + len(self._waiting)
        while self._waiting and self._in_flight < capacity:
            request, slot = self._waiting.popleft()
            if slot.done():
                continue  # cancelled while waiting
            self._in_flight += 1
            slot.set_result(self._start(request))

    def _start(self, request: InferenceRequest) -> Started:
        try:
            return self._pool.predict(self.instance_id, request)
        except Exception as error:  # raised before it started: the waiter gets it
            failed: asyncio.Future[InferenceResponse] = asyncio.get_running_loop().create_future()
            failed.set_exception(error)
            return failed

    def _capacity_changed(self) -> None:
        if self._waiting:
            self._hand_out_slots()

    def _notify_if_drained(self) -> None:
        if self._drained is not None and not self._in_flight and not self._waiting:
            self._drained.set()
