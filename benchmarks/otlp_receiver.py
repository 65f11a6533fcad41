"""A real OTLP/gRPC trace receiver on a free port: OpenTelemetry's TraceService.

What a collector does first, and no more: it accepts ``ExportTraceServiceRequest``s
and keeps their spans, so a test can check what a server exported and a benchmark
has a receiver that costs the server what a collector would. Used by the tracing
e2e tests and by the ``tracing`` benchmark scenario.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

Span = trace_pb2.Span


class OtlpReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Collects the spans exported to it (``keep=False``: counts them only)."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.count = 0
        self.resources: list[dict[str, Any]] = []
        self._spans: list[Span] = []
        self._arrived = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None)

    def Export(  # the service's method name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self._arrived:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self.count += len(scope_spans.spans)
                    if self.keep:
                        self._spans.extend(scope_spans.spans)
                if self.keep:
                    self.resources.append(attributes(resource_spans.resource.attributes))
            self._arrived.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[Span]:
        with self._arrived:
            return list(self._spans)

    def wait_for(self, found: Callable[[list[Span]], Any], what: str, timeout: float = 30.0) -> Any:
        """Wait until ``found(spans so far)`` is truthy (as spans arrive); its value."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while not (result := found(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({span.name for span in self._spans})
                    raise TimeoutError(f"Timed out waiting for {what}; spans so far: {names}")
                self._arrived.wait(left)
            return result


def attributes(pairs: Any) -> dict[str, Any]:
    """An OTLP attribute list as a dict of plain values."""
    values: dict[str, Any] = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        values[pair.key] = getattr(pair.value, kind) if kind else None
    return values
