"""OpenTelemetry tracing: a span per REST and gRPC request, children for its model's work.

The only module that imports OpenTelemetry, and it is imported only when tracing
is on (``tracing_server``, or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``:
:attr:`ServerSettings.tracing_enabled <inferd.settings.ServerSettings.tracing_enabled>`);
with tracing off the servers hold ``None`` instead of a :class:`Tracing` and pay
one ``is None`` check per request. The SDK is the ``inferd[tracing]`` extra.

Spans (OpenTelemetry's semantic conventions for HTTP and RPC, plus ``inferd.*``):

- ``POST /v2/models/{name}/infer`` (SERVER): one per REST request, named by its
  route; ``inference.GRPCInferenceService/ModelInfer`` (SERVER): one per gRPC
  call. Health probes (``/v2/health/live|ready``, ``ServerLive``, ``ServerReady``)
  are not traced, as in MLServer. A W3C ``traceparent`` header (or gRPC metadata)
  makes the span a child of the caller's, so the request shows in the caller's trace.
- Under an inference request's span, built from the times the scheduler and the
  pool recorded (observability/trace_record.py) once it has been answered:
  ``inferd.queue_wait`` (from reaching its model to its batch starting),
  ``inferd.batch`` (the execution that answered it: ``inferd.batch.size`` rows
  from ``inferd.batch.requests`` requests) and, under it, ``inferd.predict`` (the
  runtime's predict, in worker ``inferd.worker`` or in the main process). A batch
  of several requests shows in each request's trace as a child of its own, with
  the same times: each trace is whole by itself, the way a reader of one request
  wants it, where span links would send them to another trace to see it.

Sampling: an inference request's span (REST's V2 inference routes, gRPC's
``ModelInfer``, each request of a ``ModelStreamInfer``) is kept as Triton's trace
settings say for its model (observability/trace_settings.py: level, rate, count;
by default every one); every other span as the SDK's sampler says
(``OTEL_TRACES_SAMPLER``; default: follow the caller's decision, else record all).
Spans are exported in batches (BatchSpanProcessor) over OTLP/gRPC, and flushed
when the server shuts down.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from inferd.observability.trace_record import RequestTrace
from inferd.observability.trace_settings import TraceSettings
from inferd.settings import ServerSettings
from inferd.types import InferenceResponse
from inferd.version import __version__

GRPC_SERVICE = "inference.GRPCInferenceService"
# Not traced: probes would fill the traces (MLServer leaves them out too).
UNTRACED_PATHS = frozenset(("/v2/health/live", "/v2/health/ready"))
UNTRACED_GRPC_METHODS = frozenset(("ServerLive", "ServerReady"))
# Set, at its start, on the span of an inference request: the model it is for.
MODEL_NAME = "inferd.model.name"


class ModelSampler(Sampler):
    """Keeps an inference request's span (one started with MODEL_NAME) as the trace
    settings say for its model; any other span as ``other`` (the SDK's) says."""

    def __init__(self, trace_settings: TraceSettings, other: Sampler) -> None:
        self.trace_settings = trace_settings
        self.other = other

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        model = attributes.get(MODEL_NAME) if attributes else None
        if model is None:
            return self.other.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )
        if self.trace_settings.sample(str(model)):
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return f"ModelSampler{{{self.other.get_description()}}}"


@dataclass(slots=True)
class ServerSpan:
    """A request's span, current (OpenTelemetry's context) while it is answered."""

    span: Any
    token: Any  # to make the context current no more (None: it was not made current)

    def close(self) -> None:
        if self.token is not None:
            otel_context.detach(self.token)
        self.span.end()


class Tracing:
    """The server's tracer: opens request spans, adds their children, exports them."""

    def __init__(self, provider: TracerProvider, trace_settings: TraceSettings) -> None:
        self._provider = provider
        self.trace_settings = trace_settings
        # Tracers take the provider's sampler when made: an inference span's is ours.
        provider.sampler = ModelSampler(trace_settings, provider.sampler)
        self._tracer = provider.get_tracer("inferd", __version__)

    @classmethod
    def start(
        cls,
        settings: ServerSettings,
        exporter: SpanExporter | None = None,
        trace_settings: TraceSettings | None = None,
    ) -> Tracing:
        """Export to ``tracing_server`` (else where the OTEL_EXPORTER_OTLP_* variables
        say); inference requests traced as ``trace_settings`` say (None: every one)."""
        service = os.environ.get("OTEL_SERVICE_NAME") or settings.server_name
        resource = Resource.create(
            {SERVICE_NAME: service, SERVICE_VERSION: settings.server_version}
        )
        provider = TracerProvider(resource=resource)  # its sampler: OTEL_TRACES_SAMPLER
        if exporter is None:
            # As MLServer: a bare host:port is a plain connection (https:// is TLS).
            endpoint = settings.tracing_server
            exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True if endpoint else None)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, trace_settings or TraceSettings(tracing=True))

    def shutdown(self, timeout: float) -> None:
        """Export the spans still held, waiting at most ``timeout`` seconds; stop."""
        self._provider.force_flush(max(int(timeout * 1000), 1))
        self._provider.shutdown()

    # Request spans

    def http_span(
        self, scope: MutableMapping[str, Any], model: str | None = None
    ) -> ServerSpan | None:
        """Open the span of one HTTP request (an ASGI scope; ``model``: the model of an
        inference route, traced as its trace settings say); None: not traced."""
        path = scope["path"]
        if path in UNTRACED_PATHS:
            return None
        method = scope["method"]
        carrier = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        attributes = {
            "http.request.method": method,
            "url.path": path,
            "url.scheme": scope.get("scheme", "http"),
        }
        if model is not None:
            attributes[MODEL_NAME] = model
        return self._open(method, carrier, attributes)

    def end_http(self, opened: ServerSpan, route: str | None, status: int) -> None:
        span = opened.span
        if not span.is_recording():  # the sampler left it out: it has no name to add to
            opened.close()
            return
        if route is not None:
            span.update_name(f"{span.name} {route}")
            span.set_attribute("http.route", route)
        if status:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        else:  # no answer went out: the client left, or the server failed
            span.set_status(Status(StatusCode.ERROR, "no response was sent"))
        opened.close()

    def grpc_span(
        self,
        method: str,
        metadata: Iterable[tuple[str, Any]],
        current: bool = True,
        model: str | None = None,
    ) -> ServerSpan | None:
        """Open the span of one gRPC call, given its invocation metadata (made current
        unless not ``current``; ``model``: a ModelInfer's, traced as its trace settings
        say); None: not traced."""
        if method in UNTRACED_GRPC_METHODS:
            return None
        carrier = {key: value for key, value in metadata if isinstance(value, str)}
        attributes = {"rpc.system": "grpc", "rpc.service": GRPC_SERVICE, "rpc.method": method}
        if model is not None:
            attributes[MODEL_NAME] = model
        return self._open(f"{GRPC_SERVICE}/{method}", carrier, attributes, current)

    def end_grpc(self, opened: ServerSpan, code: int, server_failure: str | None) -> None:
        """Close a call's span with its status ``code``; ``server_failure``: the code's
        name when the gRPC edge counts it as the server's failure (server/grpc/edge.py)."""
        opened.span.set_attribute("rpc.grpc.status_code", code)
        if server_failure is not None:
            opened.span.set_status(Status(StatusCode.ERROR, server_failure))
        opened.close()

    def _open(
        self, name: str, carrier: dict[str, str], attributes: dict[str, Any], current: bool = True
    ) -> ServerSpan:
        parent = propagate.extract(carrier)  # the caller's traceparent, if it sent one
        span = self._tracer.start_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        if not current:
            return ServerSpan(span, None)
        token = otel_context.attach(otel_trace.set_span_in_context(span, parent))
        return ServerSpan(span, token)

    # Inference: the children

    def inference(
        self, model_name: str, model_version: str | None, within: ServerSpan | None = None
    ) -> RequestTrace | None:
        """What a request records on its way through its model, under the current
        span (or ``within``: a gRPC stream's, which is never current: each of its
        requests is traced as its model's trace settings say); None if it is not
        traced (no span, or one the sampler left out)."""
        span = within.span if within is not None else otel_trace.get_current_span()
        if not span.is_recording():
            return None
        if within is not None and not self.trace_settings.sample(model_name):
            return None
        span.set_attribute(MODEL_NAME, model_name)
        if model_version:
            span.set_attribute("inferd.model.version", model_version)
        return RequestTrace(span)

    def answered(self, trace: RequestTrace, response: InferenceResponse) -> None:
        """Add the request's child spans, from what was recorded on its way."""
        span = trace.span
        if response.model_version:
            span.set_attribute("inferd.model.version", response.model_version)
        batch = trace.batch
        if not trace.ended_ns or batch is None or not batch.ran:
            return  # answered without running (not through the scheduler)
        offset = time.time_ns() - time.perf_counter_ns()  # perf_counter -> epoch
        parent = otel_trace.set_span_in_context(span)
        queued = trace.queued_ns + offset
        dispatched = min(trace.dispatched_ns + batch.waited_ns, trace.ended_ns) + offset
        self._tracer.start_span("inferd.queue_wait", parent, start_time=queued).end(dispatched)
        attributes = {"inferd.batch.size": batch.rows, "inferd.batch.requests": batch.requests}
        run = self._tracer.start_span(
            "inferd.batch", parent, attributes=attributes, start_time=dispatched
        )
        if batch.predict_started_ns:
            worker = {} if batch.worker is None else {"inferd.worker": batch.worker}
            self._tracer.start_span(
                "inferd.predict",
                otel_trace.set_span_in_context(run),
                attributes=worker,
                start_time=batch.predict_started_ns,
            ).end(batch.predict_ended_ns)
        run.end(trace.ended_ns + offset)
