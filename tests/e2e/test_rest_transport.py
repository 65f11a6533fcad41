"""REST transport: gzip both ways, CORS, and the request size limit."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

LIMIT = 100_000
ORIGIN = "https://app.example"
STRICT_SETTINGS = {
    "gzip_enabled": False,
    "max_request_size": LIMIT,
    "cors_settings": {
        "allow_origins": [ORIGIN],
        "allow_methods": ["GET", "POST"],
        "allow_headers": ["content-type", "inference-header-content-length"],
        "expose_headers": ["inference-header-content-length"],
        "max_age": 321,
    },
}


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server with gzip responses off, CORS for one origin and a small size limit."""
    repository: Path = tmp_path_factory.mktemp("strict-repository")
    add_custom_model(repository, "echo", "Echo")
    process: ServerProcess = start_server(repository, settings=STRICT_SETTINGS)
    with httpx.Client(base_url=process.url, timeout=30) as client:
        yield client
    process.stop()


def request_of(count: int) -> bytes:
    tensor = {"name": "t", "datatype": "FP32", "shape": [count], "data": [1.25] * count}
    return json.dumps({"inputs": [tensor]}).encode()


def echoed(response: httpx.Response) -> list[Any]:
    assert response.status_code == 200, response.text
    return list(response.json()["outputs"][0]["data"])


def test_gzip_request_body_is_accepted(rest: httpx.Client) -> None:
    compressed = gzip.compress(request_of(3))
    response = rest.post(
        "/v2/models/echo/infer", content=compressed, headers={"Content-Encoding": "gzip"}
    )
    assert echoed(response) == [1.25] * 3


def test_deflate_request_body_is_accepted(rest: httpx.Client) -> None:
    compressed = zlib.compress(request_of(3))
    response = rest.post(
        "/v2/models/echo/infer", content=compressed, headers={"Content-Encoding": "deflate"}
    )
    assert echoed(response) == [1.25] * 3


def test_large_responses_are_gzipped_for_clients_that_accept_it(rest: httpx.Client) -> None:
    large = request_of(5000)
    response = rest.post(
        "/v2/models/echo/infer", content=large, headers={"Accept-Encoding": "gzip"}
    )
    assert response.headers["content-encoding"] == "gzip"
    assert int(response.headers["content-length"]) < len(large) / 4
    assert echoed(response) == [1.25] * 5000  # httpx decompresses


def test_a_gzip_body_of_several_members_is_read_whole(rest: httpx.Client) -> None:
    body = request_of(3)
    members = gzip.compress(body[:10]) + gzip.compress(body[10:])  # RFC 1952 allows it
    response = rest.post(
        "/v2/models/echo/infer", content=members, headers={"Content-Encoding": "gzip"}
    )
    assert echoed(response) == [1.25] * 3


@pytest.mark.parametrize(
    ("encoding", "content"),
    [
        ("gzip", gzip.compress(request_of(3)) + b"trailing junk"),
        ("deflate", zlib.compress(request_of(3)) + b"trailing junk"),
    ],
)
def test_bytes_after_the_compressed_body_are_refused(
    rest: httpx.Client, encoding: str, content: bytes
) -> None:
    response = rest.post(
        "/v2/models/echo/infer", content=content, headers={"Content-Encoding": encoding}
    )
    assert response.status_code == 400, response.text
    assert "The body" in response.json()["error"]


def test_responses_are_not_gzipped_otherwise(rest: httpx.Client) -> None:
    identity = rest.post(
        "/v2/models/echo/infer", content=request_of(5000), headers={"Accept-Encoding": "identity"}
    )
    assert "content-encoding" not in identity.headers
    assert identity.headers["vary"] == "Accept-Encoding"  # it would be, for another client
    assert echoed(identity) == [1.25] * 5000
    refused = rest.post(
        "/v2/models/echo/infer", content=request_of(5000), headers={"Accept-Encoding": "gzip;q=0"}
    )
    assert "content-encoding" not in refused.headers
    small = rest.post(
        "/v2/models/echo/infer", content=request_of(2), headers={"Accept-Encoding": "gzip"}
    )
    assert "content-encoding" not in small.headers


def test_gzip_enabled_false_turns_response_compression_off(strict: httpx.Client) -> None:
    response = strict.post(
        "/v2/models/echo/infer", content=request_of(5000), headers={"Accept-Encoding": "gzip"}
    )
    assert "content-encoding" not in response.headers
    assert echoed(response) == [1.25] * 5000
    compressed_request = strict.post(
        "/v2/models/echo/infer",
        content=gzip.compress(request_of(3)),
        headers={"Content-Encoding": "gzip"},
    )
    assert echoed(compressed_request) == [1.25] * 3, "gzip requests are still accepted"


def test_cors_preflight(strict: httpx.Client) -> None:
    response = strict.options(
        "/v2/models/echo/infer",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert set(response.headers["access-control-allow-methods"].split(", ")) == {"GET", "POST"}
    assert "content-type" in response.headers["access-control-allow-headers"].lower()
    assert response.headers["access-control-max-age"] == "321"


def test_cors_preflight_from_another_origin_is_refused(strict: httpx.Client) -> None:
    response = strict.options(
        "/v2/models/echo/infer",
        headers={"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"},
    )
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers


def test_cors_simple_requests(strict: httpx.Client) -> None:
    allowed = strict.get("/v2/health/live", headers={"Origin": ORIGIN})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    assert allowed.headers["access-control-expose-headers"] == "inference-header-content-length"
    other = strict.get("/v2/health/live", headers={"Origin": "https://elsewhere.example"})
    assert other.status_code == 200
    assert "access-control-allow-origin" not in other.headers


def test_no_cors_headers_without_cors_settings(rest: httpx.Client) -> None:
    response = rest.get("/v2/health/live", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in response.headers


def assert_too_large(response: httpx.Response, fragment: str = "") -> None:
    assert response.status_code == 413, response.text
    message = response.json()["error"]
    assert f"larger than max_request_size ({LIMIT} bytes){fragment}" in message


def test_request_size_limit_by_content_length(strict: httpx.Client) -> None:
    too_large = request_of(LIMIT // 5)
    assert len(too_large) > LIMIT
    assert_too_large(strict.post("/v2/models/echo/infer", content=too_large))
    assert echoed(strict.post("/v2/models/echo/infer", content=request_of(1000))) == [1.25] * 1000


def test_request_size_limit_for_chunked_bodies(strict: httpx.Client) -> None:
    too_large = request_of(LIMIT // 5)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(too_large), 8192):
            yield too_large[start : start + 8192]

    response = strict.post("/v2/models/echo/infer", content=chunks())
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert_too_large(response)
    small = request_of(10)
    assert echoed(strict.post("/v2/models/echo/infer", content=iter([small]))) == [1.25] * 10


def test_request_size_limit_stops_gzip_bombs(strict: httpx.Client) -> None:
    bomb = gzip.compress(b" " * (50 * LIMIT))
    assert len(bomb) < LIMIT
    response = strict.post(
        "/v2/models/echo/infer", content=bomb, headers={"Content-Encoding": "gzip"}
    )
    assert_too_large(response, " once decompressed")
    assert strict.get("/v2/health/ready").status_code == 200
