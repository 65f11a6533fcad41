"""What travels with one request besides its tensors.

The protocol edge that receives a request (server/rest/edge.py, server/grpc/edge.py)
makes one :class:`RequestContext` for it and hands it to :meth:`DataPlane.infer
<inferd.serving.dataplane.DataPlane.infer>` or ``infer_stream``; the layers below
read what they need from it instead of taking one more argument each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.observability.trace_record import RequestTrace

# Resolves once the client has gone away (an HTTP disconnect).
Disconnected = Callable[[], Awaitable[object]]


@dataclass(slots=True)
class RequestContext:
    # Watched only while the request waits in its model's queue: a client that leaves
    # then takes its request out unrun. A gRPC call needs none: cancelling the call
    # cancels the task that awaits the request, which does the same.
    disconnected: Disconnected | None = None
    # A traced request's record (observability/tracing.py): its scheduler and pool note their times
    # there. None when tracing is off or the request was not sampled: nothing is noted.
    trace: RequestTrace | None = None
    # The request's headers (REST: its HTTP headers, gRPC: its metadata), names in
    # lower case; a mapping the edge reads lazily: read only for a runtime that asks
    # for them (serving/runtime_headers.py).
    headers: Mapping[str, str] | None = None
    # Headers the runtime set on its answer, for the edge to send (REST) or trail (gRPC).
    response_headers: dict[str, str] | None = None


NO_CONTEXT = RequestContext()
