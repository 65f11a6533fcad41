"""The contract between a model version's scheduler and its dispatch policy.

The :class:`~inferd.dispatch.scheduler.Scheduler` is the one dispatcher of a
model version: it refuses work once it is closing, waits for what runs to
drain, and records each request's wait and run (statistics, tracing) the same
way whatever the policy. A :class:`DispatchPolicy` decides when and where each
request starts, and starts it through the version's
:class:`~inferd.dispatch.launch.Launcher`, which counts executions and notes
traced batches for every policy alike. Two policies exist:

- :class:`~inferd.dispatch.queued.QueuedDispatch`: a bounded queue with
  priorities and deadlines before the pool's free slots, grouping requests by a
  :class:`~inferd.dispatch.batch_policy.BatchPolicy` (none, or adaptive batching);
- :class:`~inferd.dispatch.sequence_dispatch.SequenceDispatch`: Triton's
  sequence batching, each sequence's requests in order on the holder keeping
  its state.

A new way of dispatching is a new class with these methods; a new way of
grouping queued requests is a new BatchPolicy.
"""

from __future__ import annotations

from typing import Protocol

from inferd.context import RequestContext
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import ResponseStream


class Started(Protocol):
    """A request a policy took on: awaiting ``result`` waits for its turn if it has
    to, runs it, and gives back what it held (its slot, its sequence's turn)."""

    # When it left the queue (perf_counter_ns), once it has; 0: it never queued.
    dispatched_ns: int

    async def result(self) -> InferenceResponse: ...


class DispatchPolicy(Protocol):
    """When and where the requests of one model version start."""

    @property
    def in_flight(self) -> int:
        """Requests (and streams holding a slot) running now."""
        ...

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn."""
        ...

    @property
    def open_streams(self) -> int:
        """Streams running that hold no slot (those that do are in ``in_flight``)."""
        ...

    @property
    def idle(self) -> bool:
        """Nothing runs or waits: a closing scheduler may finish."""
        ...

    def start(self, request: InferenceRequest, context: RequestContext) -> Started:
        """Take the request on now (or raise why not, e.g. Overloaded); what it
        decides about order is decided here, before the caller awaits anything."""
        ...

    async def open_stream(
        self, request: InferenceRequest, context: RequestContext
    ) -> ResponseStream:
        """Start ``predict_stream`` for the request once it may; its responses."""
        ...

    def closing(self) -> None:
        """The scheduler takes no more requests; those taken still run."""
        ...

    def closed(self) -> None:
        """Everything taken has finished; the instance is unloaded next."""
        ...
