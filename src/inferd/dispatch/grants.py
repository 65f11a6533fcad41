"""What a queued request receives when it starts, and how a started request gives
back its slot: the slot contract of :class:`~inferd.dispatch.queued.QueuedDispatch`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from inferd.types import InferenceResponse
from inferd.workers.base import Execution, ResponseStream


@dataclass(slots=True, frozen=True)
class Grant:
    """What a queued request receives when its batch starts."""

    execution: Execution | None
    # A batch of one runs in its own slot, which its waiter gives back; the members
    # of a real batch share the batch's slot, which the batch gives back.
    owns_slot: bool
    # A queued stream's responses; its slot is given back when it has finished.
    stream: ResponseStream | None = None

    def abandon(self, release: Callable[[], None]) -> None:
        """The waiter was cancelled as its request started: stop it, free its slot."""
        if self.stream is not None:
            self.stream.cancel()
        elif self.execution is not None and self.owns_slot:
            self.execution.when_free(release)


class ClientGone(ConnectionAbortedError):
    """The client left while its request waited in the queue; it was never run."""


async def run_in_slot(execution: Execution, release: Callable[[], None]) -> InferenceResponse:
    """The answer of a request holding a slot, giving the slot back once it is free."""
    try:
        response = await execution.result()
    except asyncio.CancelledError:
        execution.when_free(release)
        raise
    except BaseException:
        release()
        raise
    release()
    return response
