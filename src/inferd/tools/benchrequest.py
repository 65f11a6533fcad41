"""What ``inferd bench`` sends (from a file, or made from the model's metadata) and
the server-side statistics it reads (Triton's statistics extension)."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from inferd.protocol import pb
from inferd.tools import wire
from inferd.tools.v2client import Endpoint, http_post, infer_path

if TYPE_CHECKING:
    from inferd.tools.bench import BenchOptions

_RANDOM = np.random.default_rng(0)


def request_payload(options: BenchOptions, endpoint: Endpoint) -> bytes:
    """The bytes each request sends: HTTP request bytes (rest) or a ModelInferRequest."""
    request = _request_json(options, endpoint)
    if options.transport == "grpc":
        return wire.grpc_message(options.model_name, "", request)
    body, headers = wire.rest_body(request, options.binary)
    return http_post(endpoint, infer_path(options.model_name), body, headers)


def _request_json(options: BenchOptions, endpoint: Endpoint) -> dict[str, Any]:
    if options.input_file:
        with open(options.input_file, "rb") as lines:
            first = next((line for line in lines if line.strip()), b"")
        if not first:
            raise ValueError(f"{options.input_file} holds no request")
        request: dict[str, Any] = orjson.loads(first)
        return request
    return generated_request(_metadata(options, endpoint), options.batch_size, options.shapes)


def generated_request(
    metadata: dict[str, Any], batch_size: int, shapes: dict[str, list[int]]
) -> dict[str, Any]:
    """A request with random data for every input the metadata lists: a -1 first
    dimension becomes ``batch_size``, other -1s become 1, ``shapes`` overrides."""
    inputs = []
    for tensor in metadata.get("inputs") or []:
        name, datatype = tensor["name"], tensor["datatype"]
        shape = shapes.get(name) or [
            (batch_size if index == 0 else 1) if dim < 0 else dim
            for index, dim in enumerate(tensor["shape"])
        ]
        inputs.append(
            {"name": name, "datatype": datatype, "shape": shape, "data": _data(datatype, shape)}
        )
    if not inputs:
        raise ValueError("the model's metadata lists no inputs: give a request with --input-data")
    return {"inputs": inputs}


def _data(datatype: str, shape: list[int]) -> Any:
    count = int(np.prod(shape))
    if datatype == "BYTES":
        return ["x"] * count
    if datatype == "BOOL":
        return (_RANDOM.random(count) < 0.5).tolist()
    if datatype.startswith(("INT", "UINT")):
        return _RANDOM.integers(0, 10, count).tolist()
    return _RANDOM.random(count).round(4).tolist()


def _metadata(options: BenchOptions, endpoint: Endpoint) -> dict[str, Any]:
    if options.transport == "grpc":
        request = pb.ModelMetadataRequest(name=options.model_name)
        reply = _grpc_call(endpoint, "ModelMetadata", request.SerializeToString())
        message = pb.ModelMetadataResponse.FromString(reply)
        inputs = [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in message.inputs
        ]
        return {"inputs": inputs}
    body = _http_get(endpoint, f"/v2/models/{options.model_name}")
    metadata: dict[str, Any] = orjson.loads(body)
    return metadata


def model_stats(options: BenchOptions, endpoint: Endpoint) -> dict[str, float]:
    """Cumulative successes, queue and compute nanoseconds; {} if the server has no
    statistics extension."""
    try:
        if options.transport == "grpc":
            request = pb.ModelStatisticsRequest(name=options.model_name)
            reply = _grpc_call(endpoint, "ModelStatistics", request.SerializeToString())
            from google.protobuf.json_format import MessageToDict

            stats = MessageToDict(
                pb.ModelStatisticsResponse.FromString(reply), preserving_proto_field_name=True
            )
        else:
            stats = orjson.loads(_http_get(endpoint, f"/v2/models/{options.model_name}/stats"))
        infer = stats["model_stats"][0]["inference_stats"]
    except (OSError, KeyError, IndexError, ValueError):
        return {}

    def total(name: str, what: str) -> float:
        return float(infer.get(name, {}).get(what, 0))

    return {
        "count": total("success", "count"),
        "queue_ns": total("queue", "ns"),
        "compute_ns": sum(
            total(part, "ns") for part in ("compute_input", "compute_infer", "compute_output")
        ),
    }


def _http_get(endpoint: Endpoint, path: str) -> bytes:
    scheme = "https" if endpoint.tls else "http"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"{scheme}://{endpoint.netloc}{path}"
    try:
        with opener.open(url, timeout=10) as answer:
            body: bytes = answer.read()
            return body
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", "replace")[:300]
        raise OSError(f"GET {url}: HTTP {error.code} {detail}") from None


def _grpc_call(endpoint: Endpoint, method: str, message: bytes) -> bytes:
    import grpc

    with grpc.insecure_channel(endpoint.netloc) as channel:
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
        reply: bytes = call(message, timeout=10)
        return reply
