"""V2 requests as JSON (what users write, one per line) <-> what goes on the wire.

A request is a JSON object (``{"inputs": [...], "parameters": ..., "id": ...}``).
It is sent as JSON, as the REST binary tensor extension, or as a gRPC
ModelInferRequest with raw contents; a gRPC answer comes back as the same JSON
a REST server writes. Several requests can be merged into one micro-batch along
their first dimension, and the answer split back (``--batch-size``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from inferd.protocol import pb
from inferd.protocol.parameters import decode_parameters, encode_parameters
from inferd.tensors.encoding import array_from_bytes, array_from_json, array_to_bytes, array_to_json

JSON = dict[str, Any]
BINARY_HEADER = "Inference-Header-Content-Length"


def input_arrays(request: JSON) -> list[tuple[JSON, np.ndarray]]:
    """Each input's JSON (without data) and its data as an array of its shape."""
    decoded = []
    for tensor in request.get("inputs") or []:
        array = array_from_json(tensor["name"], tensor["datatype"], tensor["shape"], tensor["data"])
        head = {key: value for key, value in tensor.items() if key != "data"}
        decoded.append((head, array))
    return decoded


def rest_body(request: JSON, binary: bool) -> tuple[bytes, dict[str, str]]:
    """The REST body for ``request`` and the headers it needs (binary: the extension's)."""
    if not binary:
        return orjson.dumps(request, option=orjson.OPT_SERIALIZE_NUMPY), {}
    chunks = []
    inputs = []
    for head, array in input_arrays(request):
        raw = array_to_bytes(array)
        chunks.append(raw)
        parameters = {**(head.get("parameters") or {}), "binary_data_size": len(raw)}
        inputs.append({**head, "parameters": parameters})
    header = orjson.dumps({**request, "inputs": inputs})
    return header + b"".join(chunks), {
        "Content-Type": "application/octet-stream",
        BINARY_HEADER: str(len(header)),
    }


def grpc_message(model_name: str, model_version: str, request: JSON) -> bytes:
    """``request`` as a serialized ModelInferRequest (raw contents for every input)."""
    message = pb.ModelInferRequest(
        model_name=model_name,
        model_version=model_version,
        id=str(request.get("id") or ""),
        parameters=encode_parameters(request.get("parameters") or {}),
    )
    for head, array in input_arrays(request):
        tensor = message.inputs.add(name=head["name"], datatype=head["datatype"])
        tensor.shape.extend(array.shape)
        for key, value in encode_parameters(head.get("parameters") or {}).items():
            tensor.parameters[key].CopyFrom(value)
        message.raw_input_contents.append(array_to_bytes(array))
    for output in request.get("outputs") or []:
        requested = message.outputs.add(name=output["name"])
        for key, value in encode_parameters(output.get("parameters") or {}).items():
            requested.parameters[key].CopyFrom(value)
    return message.SerializeToString()


def grpc_response_json(body: bytes) -> JSON:
    """A serialized ModelInferResponse as the JSON a REST server answers with."""
    message = pb.ModelInferResponse.FromString(body)
    outputs = []
    raw = message.raw_output_contents
    for index, tensor in enumerate(message.outputs):
        if index < len(raw):
            array = array_from_bytes(tensor.name, tensor.datatype, tensor.shape, raw[index])
            data: Any = array_to_json(array)
        else:
            data = _typed_contents(tensor)
        output: JSON = {"name": tensor.name, "shape": list(tensor.shape)}
        output["datatype"] = tensor.datatype
        if tensor.parameters:
            output["parameters"] = decode_parameters(tensor.parameters)
        output["data"] = data
        outputs.append(output)
    response: JSON = {"model_name": message.model_name}
    if message.model_version:
        response["model_version"] = message.model_version
    if message.id:
        response["id"] = message.id
    if message.parameters:
        response["parameters"] = decode_parameters(message.parameters)
    response["outputs"] = outputs
    return response


def _typed_contents(tensor: Any) -> list[Any]:
    contents = tensor.contents
    for field, _ in contents.ListFields():
        values = list(getattr(contents, field.name))
        if field.name == "bytes_contents":
            return [value.decode("utf-8", "replace") for value in values]
        return values
    return []


def merge(requests: list[JSON]) -> tuple[JSON, list[int]]:
    """One request whose inputs are ``requests``' inputs stacked on axis 0, and each
    request's row count (to split the answer). Parameters come from the first."""
    per_input: dict[str, list[np.ndarray]] = {}
    heads: dict[str, JSON] = {}
    rows = []
    for request in requests:
        decoded = input_arrays(request)
        rows.append(decoded[0][1].shape[0] if decoded and decoded[0][1].ndim else 1)
        for head, array in decoded:
            heads.setdefault(head["name"], head)
            per_input.setdefault(head["name"], []).append(np.atleast_1d(array))
    inputs = []
    for name, arrays in per_input.items():
        if len(arrays) != len(requests):
            raise ValueError(f"input {name!r} is missing from some requests of the batch")
        stacked = np.concatenate(arrays)
        inputs.append({**heads[name], "shape": list(stacked.shape), "data": array_to_json(stacked)})
    merged = {key: value for key, value in requests[0].items() if key not in ("id", "inputs")}
    merged["inputs"] = inputs
    return merged, rows


def split(response: JSON, rows: list[int]) -> list[JSON]:
    """The answer to a merged request, cut back into one answer per request."""
    bounds = np.cumsum(rows)[:-1]
    per_output = []
    for output in response.get("outputs") or []:
        array = array_from_json(output["name"], output["datatype"], output["shape"], output["data"])
        per_output.append((output, np.split(array, bounds)))
    answers = []
    for index in range(len(rows)):
        outputs = []
        for output, pieces in per_output:
            piece = pieces[index]
            outputs.append({**output, "shape": list(piece.shape), "data": array_to_json(piece)})
        answers.append({**response, "outputs": outputs})
    return answers
