"""OpenTelemetry tracing on a real server, exporting to a real OTLP/gRPC receiver.

Each test sends a request with a W3C ``traceparent`` of its own (REST header or
gRPC metadata) and waits for the spans of that trace to arrive: the request's
span is a child of the caller's, and its model work shows under it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import grpc
import httpx
import numpy as np
import pytest

from benchmarks.otlp_receiver import OtlpReceiver, Span, attributes
from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

CHILDREN = ("inferd.queue_wait", "inferd.batch", "inferd.predict")
REST_INFER = "POST /v2/models/{name}/infer"
GRPC_INFER = "inference.GRPCInferenceService/ModelInfer"
SERVER_KIND = 2  # Span.SPAN_KIND_SERVER
ERROR_STATUS = 2  # Status.STATUS_CODE_ERROR


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    started = OtlpReceiver().start()
    yield started
    started.stop()


class TracedServer(NamedTuple):
    process: ServerProcess
    workers: int


@pytest.fixture(scope="module", params=[0, 2], ids=["in-process", "2-workers"])
def traced_server(
    request: pytest.FixtureRequest,
    receiver: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TracedServer]:
    repository = tmp_path_factory.mktemp(f"tracing-{request.param}")
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "fails", "FailsToPredict")
    add_custom_model(repository, "acc", "Accumulator", sequence_batching={})
    settings = {"parallel_workers": request.param, "tracing_server": receiver.endpoint}
    # Spans go out every 50 ms (the SDK's default is 5 s), under a service name of our own.
    env = {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "inferd-under-test"}
    process = start_server(repository, settings=settings, env=env)
    yield TracedServer(process, request.param)
    process.stop()


def new_traceparent() -> tuple[bytes, bytes, str]:
    """A caller's trace id and span id, and the traceparent naming them."""
    trace_id, span_id = os.urandom(16), os.urandom(8)
    return trace_id, span_id, f"00-{trace_id.hex()}-{span_id.hex()}-01"


def trace_spans(receiver: OtlpReceiver, trace_id: bytes, names: set[str]) -> dict[str, Span]:
    """The spans of one trace, by name, once every one of ``names`` has arrived."""

    def arrived(spans: list[Span]) -> dict[str, Span] | None:
        found = {span.name: span for span in spans if span.trace_id == trace_id}
        return found if names <= found.keys() else None

    found: dict[str, Span] = receiver.wait_for(arrived, f"spans {sorted(names)}")
    return found


def rest_body(rows: int) -> dict[str, Any]:
    data = list(range(rows * 2))
    return {"inputs": [{"name": "x", "datatype": "INT64", "shape": [rows, 2], "data": data}]}


def check_children(spans: dict[str, Span], server: Span, rows: int, workers: int) -> None:
    queue_wait, batch, predict = (spans[name] for name in CHILDREN)
    assert queue_wait.parent_span_id == server.span_id
    assert batch.parent_span_id == server.span_id
    assert predict.parent_span_id == batch.span_id
    assert attributes(batch.attributes) == {"inferd.batch.size": rows, "inferd.batch.requests": 1}
    worker = attributes(predict.attributes).get("inferd.worker")
    # The index of the worker that ran it: unique in the server, so a model with
    # workers of its own (forked from its parent by default) numbers them after the
    # server's.
    assert (isinstance(worker, int) and worker >= 0) if workers else worker is None
    # In order, inside the request (the worker's clock is the same machine's).
    slack = 2_000_000  # ns: clocks read in two processes, converted once
    assert server.start_time_unix_nano <= queue_wait.start_time_unix_nano
    assert queue_wait.end_time_unix_nano <= batch.start_time_unix_nano + slack
    assert batch.start_time_unix_nano <= predict.start_time_unix_nano + slack
    assert predict.end_time_unix_nano <= batch.end_time_unix_nano + slack
    assert batch.end_time_unix_nano <= server.end_time_unix_nano


def test_a_rest_request_shows_in_the_callers_trace(
    traced_server: TracedServer, receiver: OtlpReceiver
) -> None:
    trace_id, caller_span, traceparent = new_traceparent()
    response = httpx.post(
        f"{traced_server.process.url}/v2/models/echo/infer",
        json=rest_body(3),
        headers={"traceparent": traceparent},
    )
    assert response.status_code == 200
    spans = trace_spans(receiver, trace_id, {REST_INFER, *CHILDREN})
    server = spans[REST_INFER]
    assert server.parent_span_id == caller_span and server.kind == SERVER_KIND
    assert attributes(server.attributes) == {
        "http.request.method": "POST",
        "url.path": "/v2/models/echo/infer",
        "url.scheme": "http",
        "http.route": "/v2/models/{name}/infer",
        "http.response.status_code": 200,
        "inferd.model.name": "echo",
    }
    check_children(spans, server, 3, traced_server.workers)


def test_a_grpc_request_shows_in_the_callers_trace(
    traced_server: TracedServer, receiver: OtlpReceiver
) -> None:
    trace_id, caller_span, traceparent = new_traceparent()
    request = pb.ModelInferRequest(model_name="echo", model_version="")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[4, 1])
    request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    assert tensor.name == "x"
    with grpc.insecure_channel(traced_server.process.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        stub.ModelInfer(request, metadata=(("traceparent", traceparent),))
    spans = trace_spans(receiver, trace_id, {GRPC_INFER, *CHILDREN})
    server = spans[GRPC_INFER]
    assert server.parent_span_id == caller_span and server.kind == SERVER_KIND
    assert attributes(server.attributes) == {
        "rpc.system": "grpc",
        "rpc.service": "inference.GRPCInferenceService",
        "rpc.method": "ModelInfer",
        "rpc.grpc.status_code": 0,
        "inferd.model.name": "echo",
    }
    check_children(spans, server, 4, traced_server.workers)


def test_a_sequence_request_shows_its_model_work_too(
    traced_server: TracedServer, receiver: OtlpReceiver
) -> None:
    # Sequence requests go their own way (dispatch/sequence_scheduler.py), past the batcher.
    with httpx.Client(base_url=traced_server.process.url) as client:
        for start, rows in ((True, 1), (False, 2)):
            trace_id, caller_span, traceparent = new_traceparent()
            body = {**rest_body(rows), "parameters": {"sequence_id": 7, "sequence_start": start}}
            response = client.post(
                "/v2/models/acc/infer", json=body, headers={"traceparent": traceparent}
            )
            assert response.status_code == 200, response.text
            spans = trace_spans(receiver, trace_id, {REST_INFER, *CHILDREN})
            server = spans[REST_INFER]
            assert server.parent_span_id == caller_span
            check_children(spans, server, rows, traced_server.workers)


def test_failures_are_traced_with_their_status(
    traced_server: TracedServer, receiver: OtlpReceiver
) -> None:
    missing_trace, _, missing = new_traceparent()
    failing_trace, _, failing = new_traceparent()
    with httpx.Client(base_url=traced_server.process.url) as client:
        assert client.get("/v2/health/ready").status_code == 200  # probes are not traced
        not_found = client.post(
            "/v2/models/nobody/infer", json=rest_body(1), headers={"traceparent": missing}
        )
        assert not_found.status_code == 404
        failed = client.post(
            "/v2/models/fails/infer", json=rest_body(1), headers={"traceparent": failing}
        )
        assert failed.status_code >= 400
    server = trace_spans(receiver, missing_trace, {REST_INFER})[REST_INFER]
    assert attributes(server.attributes)["http.response.status_code"] == 404
    assert server.status.code != ERROR_STATUS  # the caller's mistake, not the server's
    failed_span = trace_spans(receiver, failing_trace, {REST_INFER})[REST_INFER]
    status = attributes(failed_span.attributes)["http.response.status_code"]
    assert status == failed.status_code
    assert (failed_span.status.code == ERROR_STATUS) == (status >= 500)
    assert all("/v2/health" not in span.name for span in receiver.spans())


def test_a_failed_grpc_call_carries_its_status_code(
    traced_server: TracedServer, receiver: OtlpReceiver
) -> None:
    trace_id, _, traceparent = new_traceparent()
    with grpc.insecure_channel(traced_server.process.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        # A probe first: not traced (spans leave in the order they end, so it would
        # have arrived by the time the next call's span has).
        stub.ServerLive(pb.ServerLiveRequest())
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(
                pb.ModelInferRequest(model_name="nobody"), metadata=(("traceparent", traceparent),)
            )
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    server = trace_spans(receiver, trace_id, {GRPC_INFER})[GRPC_INFER]
    assert (
        attributes(server.attributes)["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    )
    assert server.status.code != ERROR_STATUS
    assert not any(span.name.endswith("/ServerLive") for span in receiver.spans())


def test_the_service_is_named_by_otel_service_name(
    traced_server: TracedServer, receiver: OtlpReceiver
) -> None:
    response = httpx.get(f"{traced_server.process.url}/v2/models/echo")
    assert response.status_code == 200
    receiver.wait_for(
        lambda spans: any(span.name == "GET /v2/models/{name}" for span in spans),
        "the metadata request's span",
    )
    assert {resource.get("service.name") for resource in receiver.resources} == {
        "inferd-under-test"
    }


def test_spans_still_held_are_exported_at_shutdown(
    tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver
) -> None:
    repository = tmp_path_factory.mktemp("tracing-shutdown")
    add_custom_model(repository, "echo", "Echo")
    # The exporter would wait a minute before sending: only the shutdown's flush sends.
    process = start_server(
        repository,
        settings={"tracing_server": receiver.endpoint},
        env={"OTEL_BSP_SCHEDULE_DELAY": "60000"},
    )
    trace_id, _, traceparent = new_traceparent()
    try:
        response = httpx.post(
            f"{process.url}/v2/models/echo/infer",
            json=rest_body(1),
            headers={"traceparent": traceparent},
        )
        assert response.status_code == 200
    finally:
        assert process.stop() == 0
    spans = receiver.wait_for(
        lambda spans: {s.name for s in spans if s.trace_id == trace_id} >= {REST_INFER, *CHILDREN},
        "the spans flushed at shutdown",
        timeout=0.5,  # already there: the server exported them before it exited
    )
    assert spans
