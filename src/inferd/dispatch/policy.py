"""The contract between a model version's scheduler and its dispatch policy.

The :class:`~inferd.dispatch.scheduler.Scheduler` is the one dispatcher of a
model version: it refuses work once it is closing, waits for what runs to
drain, and runs streams. A :class:`DispatchPolicy` decides when and where each
request starts, and starts it through the version's
:class:`~inferd.dispatch.launch.Launcher`, which counts executions, notes traced
batches and records each request's wait and run (statistics, tracing) for every
policy alike. Two policies exist:

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
from inferd.errors import ModelNotReady
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import ResponseStream


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

    async def submit(self, request: InferenceRequest, context: RequestContext) -> InferenceResponse:
        """Run the request once it may (or raise why not: Overloaded, or
        :func:`unloading_error` once :meth:`closing` was called), and
        record its wait and run through the launcher (``Launcher.ran``). Its place
        in line is taken before the first ``await``."""
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


def unloading_error() -> ModelNotReady:
    """What a request gets once its model version is being unloaded."""
    return ModelNotReady("The model is being unloaded; retry the request")
