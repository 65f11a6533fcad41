"""The REST app in process: inference, errors, bodies, gzip, CORS, metrics, disconnects."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from sklearn.datasets import load_iris

from inferd.server.app import InferenceServer
from inferd.server.routes import API_ROUTES
from tests.support.models import train_iris
from tests.support.polling import wait_for_async

from .conftest import REQUEST_LIMIT, StartServer, rest_client, tensor
from .runtimes import Gated

pytestmark = pytest.mark.anyio

ORIGIN = "https://app.example"
CORS = {"allow_origins": [ORIGIN], "allow_methods": ["GET", "POST"], "allow_headers": ["*"]}


def infer_body(*inputs: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def floats(count: int) -> bytes:
    """An echo request whose answer is about 7 bytes per value."""
    return infer_body(tensor("t", "FP32", [1.25] * count))


def x(value: float) -> bytes:
    return infer_body(tensor("x", "FP32", [[value]]))


# ---- inference -------------------------------------------------------------------


async def test_json_inference_runs_the_model(rest: httpx.AsyncClient) -> None:
    rows = load_iris(return_X_y=True)[0][[0, 60, 120]]
    response = await rest.post(
        "/v2/models/iris/infer", content=infer_body(tensor("input-0", "FP64", rows.tolist()))
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert answer["model_name"] == "iris"
    assert np.ravel(answer["outputs"][0]["data"]).tolist() == train_iris().predict(rows).tolist()


async def test_a_version_answers_under_its_own_path(rest: httpx.AsyncClient) -> None:
    body = infer_body(tensor("t", "INT32", [1, 2]), id="request-7")
    answer = (await rest.post("/v2/models/versioned/versions/1/infer", content=body)).json()
    assert (answer["model_version"], answer["id"]) == ("1", "request-7")
    assert answer["outputs"][0]["data"] == [1, 2]
    default = (await rest.post("/v2/models/versioned/infer", content=body)).json()
    assert default["model_version"] == "2"


async def test_binary_tensors_both_ways_as_tritonclient_sends_them(
    rest: httpx.AsyncClient,
) -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    words = np.array([b"a", b"bc", b""], dtype=np.object_)
    inputs = [triton.InferInput("v", [2, 3], "FP32"), triton.InferInput("w", [3], "BYTES")]
    inputs[0].set_data_from_numpy(values, binary_data=True)
    inputs[1].set_data_from_numpy(words, binary_data=True)
    outputs = [triton.InferRequestedOutput(name, binary_data=True) for name in ("v", "w")]
    body, json_size = triton.InferenceServerClient.generate_request_body(inputs, outputs)
    headers = {"Inference-Header-Content-Length": str(json_size)}
    response = await rest.post("/v2/models/echo/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    header_length = int(response.headers["inference-header-content-length"])
    result = triton.InferenceServerClient.parse_response_body(
        response.content, header_length=header_length
    )
    np.testing.assert_array_equal(result.as_numpy("v"), values)
    assert result.as_numpy("w").tolist() == words.tolist()


# ---- errors ----------------------------------------------------------------------


def assert_error(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert list(response.json()) == ["error"]
    assert fragment in response.json()["error"]


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v2/models/echo/infer", b'{"inputs": [', 400, "Invalid inference request"),
        ("/v2/models/echo/infer", infer_body(tensor("t", "FP8", [1])), 400, "'FP8'"),
        ("/v2/models/nope/infer", floats(1), 404, "Request for unknown model: 'nope' is not found"),
        ("/v2/models/echo/versions/9/infer", floats(1), 404, "version 9 is not found"),
        ("/v2/models/echo/infer", floats(REQUEST_LIMIT // 5), 413, "max_request_size"),
        ("/v2/models/fails/infer", floats(1), 500, "ValueError: this model always fails"),
    ],
)
async def test_inference_errors(
    rest: httpx.AsyncClient, path: str, body: bytes, status: int, fragment: str
) -> None:
    assert_error(await rest.post(path, content=body), status, fragment)


async def test_a_full_queue_is_503_with_retry_after(
    rest: httpx.AsyncClient, inferd: InferenceServer
) -> None:
    running = asyncio.ensure_future(rest.post("/v2/models/gated/infer", content=x(1.0)))
    await wait_for_async(lambda: Gated.running == 1, "the first request to run")
    waiting = asyncio.ensure_future(rest.post("/v2/models/gated/infer", content=x(2.0)))
    await wait_for_async(lambda: waiting_in(inferd, "gated") == 1, "the second request to queue")
    refused = await rest.post("/v2/models/gated/infer", content=x(3.0))
    assert_error(refused, 503, "The queue of model 'gated' is full")
    assert refused.headers["retry-after"] == "1"
    Gated.gate.set()
    assert [(await answer).status_code for answer in (running, waiting)] == [200, 200]
    assert Gated.ran == [1.0, 2.0]


async def test_unexpected_errors_are_500_without_details(
    rest: httpx.AsyncClient, inferd: InferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> None:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(inferd.dataplane, "index", broken)
    monkeypatch.setattr(inferd.dataplane, "infer", broken)
    for response in (
        await rest.post("/v2/repository/index", json={}),
        await rest.post("/v2/models/echo/infer", content=floats(1)),
    ):
        assert_error(response, 500, "Internal server error; see the server logs")
        assert "a bug of ours" not in response.text


async def test_other_routes_share_the_error_answers(rest: httpx.AsyncClient) -> None:
    assert_error(
        await rest.get("/v2/models/nope"), 404, "Request for unknown model: 'nope' is not found"
    )
    assert_error(await rest.post("/v2/repository/index", content=b"{"), 400, "Invalid repository")
    assert_error(await rest.get("/v2/nowhere"), 404, "No route for GET /v2/nowhere")
    assert_error(await rest.get("/v2/models/echo/infer"), 405, "GET is not allowed")


def waiting_in(server: InferenceServer, name: str) -> int:
    scheduler = server.registry.find(name).scheduler
    assert scheduler is not None
    return scheduler.waiting


# ---- request bodies --------------------------------------------------------------


async def test_gzip_request_bodies_are_read(rest: httpx.AsyncClient) -> None:
    body = floats(3)
    members = gzip.compress(body[:10]) + gzip.compress(body[10:])
    for content in (gzip.compress(body), members):
        response = await rest.post(
            "/v2/models/echo/infer", content=content, headers={"Content-Encoding": "gzip"}
        )
        assert response.json()["outputs"][0]["data"] == [1.25] * 3


async def test_the_size_limit_stops_gzip_bombs(rest: httpx.AsyncClient) -> None:
    bomb = gzip.compress(b" " * (50 * REQUEST_LIMIT))
    assert len(bomb) < REQUEST_LIMIT
    response = await rest.post(
        "/v2/models/echo/infer", content=bomb, headers={"Content-Encoding": "gzip"}
    )
    assert_error(response, 413, f"max_request_size ({REQUEST_LIMIT} bytes) once decompressed")


async def test_the_size_limit_holds_for_chunked_bodies(rest: httpx.AsyncClient) -> None:
    body = floats(REQUEST_LIMIT // 5)

    async def chunks() -> Any:
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    assert_error(await rest.post("/v2/models/echo/infer", content=chunks()), 413, "larger than")


# ---- gzip answers ----------------------------------------------------------------


async def test_large_answers_are_gzipped_for_clients_that_accept_it(
    rest: httpx.AsyncClient,
) -> None:
    response = await rest.post(
        "/v2/models/echo/infer", content=floats(500), headers={"Accept-Encoding": "gzip"}
    )
    assert response.headers["content-encoding"] == "gzip"
    assert response.headers["vary"] == "Accept-Encoding"
    assert int(response.headers["content-length"]) < 500
    assert response.json()["outputs"][0]["data"] == [1.25] * 500  # httpx decompresses


@pytest.mark.parametrize("accept", ["identity", "gzip;q=0", "br", "gzip;q=x"])
async def test_answers_are_not_gzipped_for_clients_that_refuse_it(
    rest: httpx.AsyncClient, accept: str
) -> None:
    response = await rest.post(
        "/v2/models/echo/infer", content=floats(500), headers={"Accept-Encoding": accept}
    )
    assert "content-encoding" not in response.headers
    assert response.headers["vary"] == "Accept-Encoding"  # it would be, for another client
    assert int(response.headers["content-length"]) == len(response.content) > 1024


async def test_small_answers_are_not_gzipped(rest: httpx.AsyncClient) -> None:
    response = await rest.post(
        "/v2/models/echo/infer", content=floats(2), headers={"Accept-Encoding": "gzip"}
    )
    assert "content-encoding" not in response.headers and "vary" not in response.headers


async def test_only_inference_answers_are_compressed(rest: httpx.AsyncClient) -> None:
    """As Triton: tritonclient.http.aio reads other answers without decompressing them."""
    gzipped = {"Accept-Encoding": "gzip, deflate"}
    document = await rest.get("/v2/docs/dataplane.json", headers=gzipped)
    assert "content-encoding" not in document.headers
    assert document.json()["openapi"].startswith("3.1")
    unknown = "m" * 1500  # named in the error message, which is then over 1 KiB
    error = await rest.post(f"/v2/models/{unknown}/infer", content=floats(1), headers=gzipped)
    assert "content-encoding" not in error.headers
    assert_error(error, 404, f"Request for unknown model: '{unknown}' is not found")


async def test_deflate_is_used_when_the_client_prefers_it(rest: httpx.AsyncClient) -> None:
    response = await rest.post(
        "/v2/models/echo/infer",
        content=floats(500),
        headers={"Accept-Encoding": "gzip;q=0.5, deflate"},
    )
    assert response.headers["content-encoding"] == "deflate"
    assert response.json()["outputs"][0]["data"] == [1.25] * 500  # httpx decompresses


async def test_gzip_disabled_answers_plainly(start_inferd: StartServer) -> None:
    async with rest_client(await start_inferd(gzip_enabled=False)) as rest:
        response = await rest.post(
            "/v2/models/echo/infer", content=floats(500), headers={"Accept-Encoding": "gzip"}
        )
    assert "content-encoding" not in response.headers and "vary" not in response.headers
    assert response.json()["outputs"][0]["data"] == [1.25] * 500


# ---- CORS: the same endpoint, reached through Starlette ----------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/models/echo/infer", floats(500)),
        ("/v2/models/versioned/versions/1/infer", floats(2)),
        ("/v2/models/nope/infer", floats(2)),
        ("/v2/models/echo/infer", b"{"),
    ],
)
async def test_cors_requests_are_answered_as_the_fast_path_answers(
    start_inferd: StartServer, path: str, body: bytes
) -> None:
    server = await start_inferd(cors_settings=CORS)
    headers = {"Accept-Encoding": "gzip"}
    async with rest_client(server) as rest:
        direct = await rest.post(path, content=body, headers=headers)
        cors = await rest.post(path, content=body, headers=headers | {"Origin": ORIGIN})
    assert cors.headers["access-control-allow-origin"] == ORIGIN
    assert "access-control-allow-origin" not in direct.headers
    assert (cors.status_code, cors.content) == (direct.status_code, direct.content)
    for name in ("content-type", "content-encoding", "inference-header-content-length"):
        assert cors.headers.get(name) == direct.headers.get(name)
    assert http_counts(server) == {("POST", route_of(path)): {direct.status_code: 2}}


# ---- metrics ---------------------------------------------------------------------


def route_of(path: str) -> str:
    return (
        "/v2/models/{name}/versions/{version}/infer"
        if "versions" in path
        else ("/v2/models/{name}/infer")
    )


def http_counts(server: InferenceServer) -> dict[tuple[str, str], dict[int, int]]:
    """Requests recorded so far, by (method, path label) and status."""
    assert server.http_stats is not None
    return {
        (route.method, route.path): {status: h.count for status, h in route.by_status.items()}
        for route in server.http_stats.routes()
        if route.by_status
    }


async def test_metrics_label_requests_by_route_template(
    rest: httpx.AsyncClient, inferd: InferenceServer
) -> None:
    await rest.post("/v2/models/echo/infer", content=floats(1))
    await rest.post("/v2/models/nope/infer", content=floats(1))
    await rest.post("/v2/models/versioned/versions/1/infer", content=floats(1))
    await rest.get("/v2/models/versioned/versions/2/ready")
    await rest.get("/v2/no/such/route/for/echo")
    await rest.request("BREW", "/v2/health/live")
    assert http_counts(inferd) == {
        ("POST", "/v2/models/{name}/infer"): {200: 1, 404: 1},
        ("POST", "/v2/models/{name}/versions/{version}/infer"): {200: 1},
        ("GET", "/v2/models/{name}/versions/{version}/ready"): {200: 1},
        ("GET", "<unmatched>"): {404: 1},
        ("OTHER", "/v2/health/live"): {405: 1},
    }
    assert inferd.http_stats is not None
    assert {p.method: p.count for p in inferd.http_stats.in_progress()}.get("POST") == 0


async def test_every_route_is_served_by_starlette_and_documented(
    rest: httpx.AsyncClient, inferd: InferenceServer
) -> None:
    declared = {(route.method, route.path) for route in API_ROUTES}
    app = inferd.rest_app().app
    served = {(m, r.path) for r in app.routes for m in r.methods - {"HEAD"}}  # type: ignore[attr-defined]
    document = (await rest.get("/v2/docs/dataplane.json")).json()
    documented = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert served == declared == documented
    ids = [document["paths"][r.path][r.method.lower()]["operationId"] for r in API_ROUTES]
    assert ids == [route.operation_id for route in API_ROUTES]


# ---- a client that leaves --------------------------------------------------------


async def test_a_client_that_leaves_while_queued_is_answered_499_and_not_run(
    rest: httpx.AsyncClient, inferd: InferenceServer
) -> None:
    running = asyncio.ensure_future(rest.post("/v2/models/gated/infer", content=x(1.0)))
    await wait_for_async(lambda: Gated.running == 1, "the first request to run")
    body = x(2.0)
    unread = [{"type": "http.request", "body": body, "more_body": False}]
    left = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        """The body, then (once the test says so) the client's disconnect."""
        if unread:
            return unread.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v2/models/gated/infer",
        "headers": [(b"content-length", str(len(body)).encode())],
    }
    leaving = asyncio.ensure_future(inferd.rest_app()(scope, receive, send))
    await wait_for_async(lambda: waiting_in(inferd, "gated") == 1, "the second request to queue")
    left.set()
    await leaving
    assert sent[0]["status"] == 499
    assert waiting_in(inferd, "gated") == 0
    Gated.gate.set()
    assert (await running).status_code == 200
    assert Gated.ran == [1.0], "the request of the client that left never ran"
    assert http_counts(inferd)[("POST", "/v2/models/{name}/infer")] == {200: 1, 499: 1}
