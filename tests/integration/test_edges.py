"""The same request through every entry point sees the same edge.

REST ``/infer``, ``/infer_stream``, ``/generate``, ``/generate_stream``, a runtime's
own route, gRPC ``ModelInfer`` and ``ModelStreamInfer``, and Ray Serve's HTTP and
gRPC entries (a replica called in process, as Ray's proxies call it; when Ray is
installed) each send one request to an MLServer ``MLModel`` runtime
(tests/e2e/runtimes/tagged.py) that answers the header ``x-tag`` it received and
sets the response header ``x-echo-tag``. The server restricts the inference group
(header ``api-key``) and traces into memory. Each entry must: refuse the request
without its key, answer it with the key, hand the runtime its headers, carry the
runtime's response header back (not for runtimes' own routes: a handler sets no
headers), and show the request's span with the model's name on it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from inferd.observability.trace_settings import TraceSettings
from inferd.observability.tracing import Tracing
from inferd.protocol import pb, pb_grpc
from inferd.server import parts as parts_module
from tests.support.models import add_tagged_model
from tests.support.polling import wait_for_async

from .conftest import StartServer

pytestmark = pytest.mark.anyio

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

KEY = "the-key"
V2_BODY = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}
FLAT_BODY = {"text": "hi"}
ENTRIES = (
    "rest infer",
    "rest infer_stream",
    "rest generate",
    "rest generate_stream",
    "rest custom route",
    "grpc ModelInfer",
    "grpc ModelStreamInfer",
    "ray http",
    "ray grpc",
)


def restriction(repository: Path) -> dict[str, Any]:
    return {
        "apis": ["inference"],
        "header": "api-key",
        "values_from_file": str(repository.parent / "api-keys"),
    }


def write_models(repository: Path) -> Path:
    """The tagged model; settings.json restricts inference (what Ray's replica reads)."""
    add_tagged_model(repository)
    (repository.parent / "api-keys").write_text(KEY)
    settings = {"restricted_apis": [restriction(repository)], "parallel_workers": 0}
    (repository / "settings.json").write_text(json.dumps(settings))
    return repository


@dataclass
class Answer:
    """What one entry answered: refused (403 / PERMISSION_DENIED), else the tag the
    runtime saw and the response header that came back (None: none)."""

    refused: bool
    tag: str | None = None
    echoed: str | None = None


# Sends the request with these headers (gRPC: metadata); what it answered.
Entry = Callable[[dict[str, str]], Awaitable[Answer]]


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Every server built in the test traces into this exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(
        parts_module,
        "start_tracing",
        # Every request traced, as a server with tracing on starts (its settings' own
        # trace settings start OFF: no tracing_server is set here).
        lambda settings, trace_settings: Tracing(provider, TraceSettings(tracing=True)),
    )
    return exporter


@pytest.fixture
async def entries(
    spans: InMemorySpanExporter, start_inferd: StartServer, repository: Path
) -> AsyncIterator[dict[str, Entry]]:
    """Each entry point, by name, of one server (and one Ray replica of the same
    repository, when Ray is installed)."""
    server = await start_inferd(restricted_apis=[restriction(repository)])
    grpc_server = server.grpc_server()
    await grpc_server.start()
    rest = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=server.served_rest_app()), base_url="http://inferd"
    )
    channel = grpc.aio.insecure_channel(grpc_server.address)
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    found: dict[str, Entry] = {
        "rest infer": lambda h: rest_infer(rest, "/v2/models/tagged/infer", V2_BODY, h),
        "rest infer_stream": lambda h: rest_events(rest, "infer_stream", V2_BODY, h),
        "rest generate": lambda h: rest_infer(rest, "/v2/models/tagged/generate", FLAT_BODY, h),
        "rest generate_stream": lambda h: rest_events(rest, "generate_stream", FLAT_BODY, h),
        "rest custom route": lambda h: rest_route(rest, h),
        "grpc ModelInfer": lambda h: grpc_unary(stub, h),
        "grpc ModelStreamInfer": lambda h: grpc_stream(stub, h),
    }
    replica = await ray_replica(repository)
    if replica is not None:
        ray_rest = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=replica.__serve_build_asgi_app__()),
            base_url="http://ray",
        )
        found["ray http"] = lambda h: rest_infer(ray_rest, "/v2/models/tagged/infer", V2_BODY, h)
        found["ray grpc"] = lambda h: ray_grpc(replica, h)
    try:
        yield found
    finally:
        await channel.close()
        await grpc_server.stop(0)
        await rest.aclose()
        if replica is not None:
            await ray_rest.aclose()
            await replica.server.close()


async def ray_replica(repository: Path) -> Any:
    """A replica of inferd's Ray Serve deployment, built as Ray builds it (None:
    Ray Serve is not installed)."""
    try:
        from inferd.ray import InferdReplica
    except ImportError:
        return None

    class Replica(InferdReplica):
        def __del__(self) -> None:  # closed by the fixture, in its event loop
            pass

    replica = Replica.__new__(Replica)
    await replica.__init__(str(repository))
    return replica


def tag_of(outputs: list[dict[str, Any]]) -> str:
    (output,) = outputs
    assert output["name"] == "tag"
    return str(output["data"][0])


async def rest_infer(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> Answer:
    response = await client.post(path, json=body, headers=headers)
    if response.status_code == 403:
        return Answer(refused=True)
    assert response.status_code == 200, response.text
    answer = response.json()
    tag = tag_of(answer["outputs"]) if "outputs" in answer else answer["tag"]
    return Answer(False, tag, response.headers.get("x-echo-tag"))


async def rest_events(
    client: httpx.AsyncClient, route: str, body: dict[str, Any], headers: dict[str, str]
) -> Answer:
    response = await client.post(f"/v2/models/tagged/{route}", json=body, headers=headers)
    if response.status_code == 403:
        return Answer(refused=True)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    (event,) = events
    answer = json.loads(event)
    tag = tag_of(answer["outputs"]) if "outputs" in answer else answer["tag"]
    return Answer(False, tag, response.headers.get("x-echo-tag"))


async def rest_route(client: httpx.AsyncClient, headers: dict[str, str]) -> Answer:
    response = await client.post("/tagged/tag", json={}, headers=headers)
    if response.status_code == 403:
        return Answer(refused=True)
    assert response.status_code == 200, response.text
    return Answer(False, response.json()["tag"], None)


def infer_message() -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="tagged")
    tensor = message.inputs.add(name="text", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(b"hi")
    return message


def grpc_tag(answer: pb.ModelInferResponse) -> str:
    (output,) = answer.outputs
    assert output.name == "tag"
    raw = answer.raw_output_contents[0]
    return raw[4:].decode()  # one BYTES element: its 4-byte length, then the bytes


async def grpc_unary(stub: pb_grpc.GRPCInferenceServiceStub, headers: dict[str, str]) -> Answer:
    call = stub.ModelInfer(infer_message(), metadata=tuple(headers.items()))
    try:
        answer = await call
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
        return Answer(refused=True)
    trailing = dict(await call.trailing_metadata() or ())
    return Answer(False, grpc_tag(answer), trailing.get("x-echo-tag"))


async def grpc_stream(stub: pb_grpc.GRPCInferenceServiceStub, headers: dict[str, str]) -> Answer:
    call = stub.ModelStreamInfer(metadata=tuple(headers.items()))
    try:
        await call.write(infer_message())
        await call.done_writing()
        answers = [answer async for answer in call]
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
        return Answer(refused=True)
    (answer,) = answers
    assert not answer.error_message, answer.error_message
    trailing = dict(await call.trailing_metadata() or ())
    return Answer(False, grpc_tag(answer.infer_response), trailing.get("x-echo-tag"))


class RayContext:
    """What Ray's gRPC proxy hands a replica (ray.serve.grpc_util.RayServegRPCContext)."""

    def __init__(self, metadata: dict[str, str]) -> None:
        self.metadata = list(metadata.items())
        self.code: grpc.StatusCode | None = None
        self.trailing: list[tuple[str, str]] = []

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self.metadata

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        pass

    def set_trailing_metadata(self, metadata: list[tuple[str, str]]) -> None:
        self.trailing = metadata


async def ray_grpc(replica: Any, headers: dict[str, str]) -> Answer:
    context = RayContext(headers)
    try:
        answer = await replica.ModelInfer(infer_message().SerializeToString(), grpc_context=context)
    except Exception:
        assert context.code == grpc.StatusCode.PERMISSION_DENIED
        return Answer(refused=True)
    return Answer(False, grpc_tag(answer), dict(context.trailing).get("x-echo-tag"))


@pytest.mark.parametrize("entry", ENTRIES)
async def test_every_entry_point_goes_through_its_protocols_edge(
    entries: dict[str, Entry], spans: InMemorySpanExporter, entry: str
) -> None:
    if entry not in entries:
        pytest.skip("Ray Serve is not installed")
    send = entries[entry]
    assert (await send({"x-tag": "no key"})).refused
    assert (await send({"x-tag": "wrong key", "api-key": "nope"})).refused
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    traceparent = f"00-{trace_id}-b7ad6b7169203331-01"
    answer = await send({"x-tag": "seen", "api-key": KEY, "traceparent": traceparent})
    assert answer == Answer(False, "seen", None if entry == "rest custom route" else "seen")

    def traced() -> list[Any]:
        return [
            span
            for span in spans.get_finished_spans()
            if span.context.trace_id == int(trace_id, 16)
            and span.attributes.get("inferd.model.name") == "tagged"
        ]

    (span,) = await wait_for_async(traced, f"the span of {entry}'s request")
    assert span.parent.span_id == int("b7ad6b7169203331", 16)  # the caller's
