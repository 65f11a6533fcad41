"""Compression as Triton does it: only inference answers, only as the request asks.

tritonclient.http.aio turns aiohttp's decompression off while aiohttp still sends
``Accept-Encoding: gzip, deflate``: every other answer must come uncompressed for it
to read them; its inference calls decompress what Content-Encoding says.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib

import httpx
import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.grpc.aio
import tritonclient.http
import tritonclient.http.aio

from tests.support.serverproc import ServerProcess

LARGE = np.arange(2000, dtype=np.float32).reshape(1, 2000)  # 8 KB: over the 1 KiB floor


def _http_inputs(module: object) -> list[object]:
    tensor = module.InferInput("x", list(LARGE.shape), "FP32")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(LARGE)
    return [tensor]


def test_other_answers_are_never_compressed(rest: httpx.Client) -> None:
    asked = {"Accept-Encoding": "gzip, deflate"}
    stats = rest.get("/v2/models/stats", headers=asked)
    assert stats.status_code == 200 and len(stats.content) > 1024
    assert "content-encoding" not in stats.headers
    metadata = rest.get("/v2/models/typed", headers=asked)
    assert "content-encoding" not in metadata.headers


@pytest.mark.parametrize(
    ("coding", "decompress"), [("gzip", gzip.decompress), ("deflate", zlib.decompress)]
)
def test_inference_answers_are_compressed_as_asked(
    server: ServerProcess, coding: str, decompress: object
) -> None:
    body = {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [1, 2000], "data": LARGE.ravel().tolist()}
        ]
    }
    # A raw client that does not decompress: what went over the wire.
    with httpx.Client(base_url=server.url, timeout=30) as raw:
        request = raw.build_request(
            "POST", "/v2/models/echo/infer", json=body, headers={"Accept-Encoding": coding}
        )
        response = raw.send(request, stream=True)
        wire = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == coding
    assert response.headers["vary"] == "Accept-Encoding"
    assert b'"outputs"' in decompress(wire)  # type: ignore[operator]


def test_tritonclient_http_aio_reads_statistics_and_compressed_answers(
    server: ServerProcess,
) -> None:
    async def run() -> None:
        client = tritonclient.http.aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            stats = await client.get_inference_statistics()
            assert {entry["name"] for entry in stats["model_stats"]} >= {"echo", "iris"}
            metadata = await client.get_model_metadata("typed")
            assert metadata["name"] == "typed"
            for algorithm in (None, "gzip", "deflate"):
                result = await client.infer(
                    "echo",
                    _http_inputs(tritonclient.http),
                    response_compression_algorithm=algorithm,
                )
                np.testing.assert_array_equal(result.as_numpy("x"), LARGE)
        finally:
            await client.close()

    asyncio.run(run())


def test_tritonclient_http_sync_both_codings(server: ServerProcess) -> None:
    client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        assert client.get_inference_statistics()["model_stats"]
        for algorithm in ("gzip", "deflate"):
            result = client.infer(
                "echo",
                _http_inputs(tritonclient.http),
                request_compression_algorithm=algorithm,
                response_compression_algorithm=algorithm,
            )
            np.testing.assert_array_equal(result.as_numpy("x"), LARGE)
    finally:
        client.close()


def test_tritonclient_grpc_sync_and_aio_with_compression(server: ServerProcess) -> None:
    with tritonclient.grpc.InferenceServerClient(server.grpc_address) as client:
        tensor = tritonclient.grpc.InferInput("x", list(LARGE.shape), "FP32")
        tensor.set_data_from_numpy(LARGE)
        result = client.infer("echo", [tensor], compression_algorithm="gzip")
        np.testing.assert_array_equal(result.as_numpy("x"), LARGE)
        assert client.get_inference_statistics().model_stats

    async def run() -> None:
        async with tritonclient.grpc.aio.InferenceServerClient(server.grpc_address) as client:
            tensor = tritonclient.grpc.aio.InferInput("x", list(LARGE.shape), "FP32")
            tensor.set_data_from_numpy(LARGE)
            result = await client.infer("echo", [tensor], compression_algorithm="deflate")
            np.testing.assert_array_equal(result.as_numpy("x"), LARGE)
            assert (await client.get_inference_statistics()).model_stats

    asyncio.run(run())
