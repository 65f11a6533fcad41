"""Streaming over REST in process: server-sent events, generate, disconnects.

Timing and disconnects need a real HTTP connection (httpx's ASGI transport hands
over a response only once it is complete), so those tests serve the app with
uvicorn on a free port, in the test's event loop, as ``inferd start`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
import uvicorn

from inferd.server.app import InferenceServer
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES, StartServer, free_port, rest_client, tensor
from .conftest import write_models as write_integration_models
from .runtimes import Tokens

pytestmark = pytest.mark.anyio

TOKENS_INPUTS = [
    {"name": "text_input", "datatype": "BYTES", "shape": [1]},
    {"name": "max_tokens", "datatype": "INT32", "shape": [1]},
]
ECHO_INPUTS = [
    {"name": "text_input", "datatype": "BYTES", "shape": [-1]},
    {"name": "max_tokens", "datatype": "INT32", "shape": [1]},
    {"name": "features", "datatype": "FP32", "shape": [-1, 2]},
]
MODEL_DELAY = 0.2  # seconds between two responses of the timing tests


def write_models(repository: Path) -> Path:
    """The integration tests' models plus streaming ones: `tokens` (an async generator),
    `thread-tokens` (a plain generator, in threads), `generator` (tokens with
    declared inputs) and `echo-typed` (echo with declared inputs)."""
    write_integration_models(repository)
    tokens, echo = f"{RUNTIMES}.Tokens", f"{RUNTIMES}.Echo"
    write_model_folder(repository, "tokens", tokens)
    write_model_folder(
        repository, "thread-tokens", f"{RUNTIMES}.ThreadTokens", threads_per_worker=2
    )
    write_model_folder(repository, "generator", tokens, inputs=TOKENS_INPUTS)
    write_model_folder(repository, "echo-typed", echo, inputs=ECHO_INPUTS)
    return repository


class _Uvicorn(uvicorn.Server):
    def capture_signals(self) -> Any:  # the test runner owns the signals
        return contextlib.nullcontext()


@pytest.fixture
async def base_url(inferd: InferenceServer) -> AsyncIterator[str]:
    """``inferd``'s REST app served by uvicorn on a free port, in this event loop."""
    port = free_port()
    config = uvicorn.Config(
        inferd.rest_app(), host="127.0.0.1", port=port, lifespan="off", log_config=None
    )
    server = _Uvicorn(config)
    serving = asyncio.create_task(server.serve())
    await wait_for_async(lambda: server.started or serving.done(), "uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await serving


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        yield client


def stream_body(**parameters: Any) -> dict[str, Any]:
    return {"id": "s1", "inputs": [tensor("x", "FP32", [1.0])], "parameters": parameters}


def parse_events(text: str) -> list[tuple[str, Any]]:
    """(event type, decoded data) of each event of an SSE body."""
    events = []
    for block in text.split("\n\n"):
        if not block:
            continue
        kind = "message"
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                kind = value
            elif field == "data":
                events.append((kind, json.loads(value)))
    return events


def token(model: str, index: int, prefix: str = "tok") -> dict[str, Any]:
    """The V2 response a Tokens model streams as response ``index``."""
    return {
        "model_name": model,
        "id": "s1",
        "outputs": [
            {
                "name": "text_output",
                "datatype": "BYTES",
                "shape": [1],
                "data": [f"{prefix}{index}"],
            },
            {"name": "index", "datatype": "INT64", "shape": [1], "data": [index]},
        ],
    }


# ---- server-sent events ------------------------------------------------------------


@pytest.mark.parametrize("model", ["tokens", "thread-tokens"])
async def test_events_are_sent_as_the_model_yields_them(
    http: httpx.AsyncClient, model: str
) -> None:
    body = stream_body(count=3, delay=MODEL_DELAY)
    arrivals: list[float] = []
    lines: list[str] = []
    headers = {"Accept-Encoding": "gzip"}
    async with http.stream(
        "POST", f"/v2/models/{model}/infer_stream", json=body, headers=headers
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert "content-encoding" not in response.headers  # events are never gzipped
        async for line in response.aiter_lines():
            lines.append(line)
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
    assert parse_events("\n".join(lines) + "\n") == [
        ("message", token(model, index)) for index in range(3)
    ]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    # Each event left when the model yielded it, not all together at the end.
    assert all(gap > MODEL_DELAY / 2 for gap in gaps), gaps


async def test_an_error_mid_stream_is_a_last_error_event(http: httpx.AsyncClient) -> None:
    response = await http.post("/v2/models/tokens/infer_stream", json=stream_body(fail_at=2))
    assert response.status_code == 200  # the status left with the first event
    assert response.text.endswith("\n\n")  # the body ended cleanly after the error
    assert parse_events(response.text) == [
        ("message", token("tokens", 0)),
        ("message", token("tokens", 1)),
        ("error", {"error": "Model 'tokens' failed: ValueError: the stream broke at 2"}),
    ]
    assert response.text.endswith(
        'event: error\ndata: {"error":"Model \'tokens\' failed: ValueError: the stream '
        'broke at 2"}\n\n'
    )


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("tokens", stream_body(fail_at=0), 500, "ValueError: the stream broke at 0"),
        ("nope", stream_body(), 404, "Request for unknown model: 'nope' is not found"),
        ("tokens", {"inputs": 3}, 400, "Invalid inference request"),
    ],
)
async def test_an_error_before_the_first_event_is_an_ordinary_answer(
    rest: httpx.AsyncClient, path: str, body: Any, status: int, message: str
) -> None:
    response = await rest.post(f"/v2/models/{path}/infer_stream", json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]


async def test_a_model_that_only_predicts_answers_one_event(rest: httpx.AsyncClient) -> None:
    body = {"id": "s1", "inputs": [tensor("t", "INT32", [1, 2])]}
    response = await rest.post("/v2/models/versioned/versions/1/infer_stream", json=body)
    assert response.status_code == 200
    assert parse_events(response.text) == [
        (
            "message",
            {
                "model_name": "versioned",
                "model_version": "1",
                "id": "s1",
                "outputs": [{"name": "t", "datatype": "INT32", "shape": [2], "data": [1, 2]}],
            },
        )
    ]


async def test_binary_tensor_data_is_accepted_and_answered_as_json(
    rest: httpx.AsyncClient,
) -> None:
    values = triton.InferInput("v", [2], "FP32")
    values.set_data_from_numpy(np.array([1.5, 2.5], dtype=np.float32), binary_data=True)
    # It asks for binary outputs too (binary_data_output): events answer JSON anyway.
    body, json_size = triton.InferenceServerClient.generate_request_body([values])
    headers = {"Inference-Header-Content-Length": str(json_size)}
    response = await rest.post("/v2/models/echo/infer_stream", content=body, headers=headers)
    assert response.status_code == 200, response.text
    [(_, answer)] = parse_events(response.text)
    assert answer["outputs"] == [
        {"name": "v", "datatype": "FP32", "shape": [2], "data": [1.5, 2.5]}
    ]


async def test_a_streaming_only_model_refuses_unary_calls(rest: httpx.AsyncClient) -> None:
    response = await rest.post("/v2/models/tokens/infer", json=stream_body())
    assert response.status_code == 400
    assert "/infer_stream" in response.json()["error"]
    # /generate takes it when it sends exactly one response (Triton's decoupled models).
    response = await rest.post("/v2/models/tokens/generate", json={"text_input": "a"})
    assert response.status_code == 400
    assert "more than one response" in response.json()["error"]


@pytest.mark.parametrize("model", ["tokens", "thread-tokens"])
async def test_a_client_that_disconnects_stops_the_generator(
    http: httpx.AsyncClient, inferd: InferenceServer, model: str
) -> None:
    body = stream_body(count=10_000, delay=0.01) | {"id": "leaves"}
    received = 0
    async with http.stream("POST", f"/v2/models/{model}/infer_stream", json=body) as response:
        async for line in response.aiter_lines():
            received += line.startswith("data: ")
            if received == 2:
                break
    # Leaving the block closed the connection; the model's finally runs soon after.
    await wait_for_async(lambda: "leaves" in Tokens.stopped, "the generator to stop", timeout=5)
    stats = inferd.dataplane.statistics(model)[0]
    await wait_for_async(
        lambda: stats.to_dict()["inference_stats"]["fail"]["count"] == 1, "the count"
    )


# ---- generate ----------------------------------------------------------------------


async def test_generate_maps_flat_keys_to_declared_inputs(rest: httpx.AsyncClient) -> None:
    body = {
        "text_input": "hi",
        "max_tokens": 8,
        "features": [1.5, 2.5],
        "temperature": 0.5,  # not an input: a parameter
        "id": "g1",
    }
    response = await rest.post("/v2/models/echo-typed/generate", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "model_name": "echo-typed",
        "id": "g1",
        "text_input": "hi",
        "max_tokens": 8,
        "features": [[1.5, 2.5]],
    }


async def test_generate_without_declared_inputs_types_values_from_json(
    rest: httpx.AsyncClient,
) -> None:
    body = {"text_input": "hi", "n": 3, "p": 0.25, "flags": [True, False], "words": ["a", "b"]}
    response = await rest.post("/v2/models/versioned/versions/1/generate", json=body)
    assert response.status_code == 200, response.text
    assert response.json() == {"model_name": "versioned", "model_version": "1", **body}


async def test_generate_errors_are_ordinary_answers(rest: httpx.AsyncClient) -> None:
    response = await rest.post("/v2/models/echo-typed/generate", json={"max_tokens": "many"})
    assert response.status_code == 400
    assert "max_tokens" in response.json()["error"]
    response = await rest.post("/v2/models/echo/generate", content=b"[1, 2]")
    assert response.status_code == 400
    assert "one JSON object" in response.json()["error"]
    assert (await rest.post("/v2/models/nope/generate", json={"a": 1})).status_code == 404


async def test_generate_stream_answers_flat_events(http: httpx.AsyncClient) -> None:
    body = {"text_input": "w", "max_tokens": 3, "id": "g2"}
    response = await http.post("/v2/models/generator/generate_stream", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert parse_events(response.text) == [
        ("message", {"model_name": "generator", "id": "g2", "text_output": f"w{i}", "index": i})
        for i in range(3)
    ]


# ---- routes: metrics, CORS ---------------------------------------------------------


async def test_streams_are_counted_under_their_route_template(
    rest: httpx.AsyncClient, inferd: InferenceServer
) -> None:
    await rest.post("/v2/models/tokens/infer_stream", json=stream_body())
    await rest.post("/v2/models/nope/generate_stream", json={"a": 1})
    await rest.post("/v2/models/versioned/versions/1/generate", json={"a": 1})
    assert inferd.http_stats is not None
    counts = {
        route.path: {status: h.count for status, h in route.by_status.items()}
        for route in inferd.http_stats.routes()
        if route.by_status
    }
    assert counts == {
        "/v2/models/{name}/infer_stream": {200: 1},
        "/v2/models/{name}/generate_stream": {404: 1},
        "/v2/models/{name}/versions/{version}/generate": {200: 1},
    }


async def test_cors_applies_to_streams(start_inferd: StartServer) -> None:
    origin = "https://app.example"
    server = await start_inferd(cors_settings={"allow_origins": [origin]})
    async with rest_client(server) as client:
        response = await client.post(
            "/v2/models/tokens/infer_stream", json=stream_body(), headers={"Origin": origin}
        )
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == origin
    assert len(parse_events(response.text)) == 3
