"""V2 REST bodies <-> core types, including the binary tensor data extension.

Decoding validates with msgspec (no pydantic per request) and turns tensor data
into numpy in one step. Encoding writes numpy straight to JSON (orjson) or to
raw bytes after a JSON header.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import numpy as np
import orjson

from inferd.errors import InvalidRequest
from inferd.json_refusals import not_json_reason, shape_fault
from inferd.server.output_form import (
    BINARY_DATA,
    BINARY_OUTPUT,
    BINARY_SIZE,
    PLAIN,
    OutputForm,
    flag,
    taken_from_outputs,
)
from inferd.tensors.encoding import array_from_bytes, array_from_json, array_to_bytes, array_to_json
from inferd.triton.shm import (
    REGION,
    RegionClaim,
    check_outputs,
    read_input,
    without_location,
)
from inferd.types import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    Tensor,
    refuse_repeated_outputs,
    repeated_input,
)

HEADER_LENGTH = "inference-header-content-length"
BINARY_CONTENT_TYPE = "application/octet-stream"
JSON_CONTENT_TYPE = "application/json"


class _InputBody(msgspec.Struct):
    name: str
    shape: list[Any]
    datatype: str
    data: Any = None
    parameters: dict[str, Any] | None = None


class _OutputBody(msgspec.Struct):
    name: str
    parameters: dict[str, Any] | None = None


class _RequestBody(msgspec.Struct):
    inputs: list[_InputBody]
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[_OutputBody] | None = None


class _RepositoryIndexBody(msgspec.Struct):
    ready: bool | None = None


_request_decoder = msgspec.json.Decoder(_RequestBody)
_index_decoder = msgspec.json.Decoder(_RepositoryIndexBody)

Body = TypeVar("Body")


def _decode(decoder: msgspec.json.Decoder[Body], body: bytes, what: str, hint: str = "") -> Body:
    """``body`` decoded, or InvalidRequest saying why not (``hint`` helps with syntax)."""
    try:
        return decoder.decode(body)
    except RecursionError:  # msgspec follows Python's recursion limit
        raise InvalidRequest(
            f"Invalid {what}: the JSON is nested too deeply; send tensor data flat"
        ) from None
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"Invalid {what}: {shape_fault(error).reason()}") from None
    # msgspec releases differ in how they refuse bytes that are not UTF-8 (a
    # UnicodeDecodeError before 0.23, a DecodeError since): json_refusals words both.
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        raise InvalidRequest(f"Invalid {what}: {not_json_reason(body, error)}{hint}") from None


def decode_infer_request(
    body: bytes, header_length: str | None, regions: RegionClaim | None = None
) -> tuple[InferenceRequest, OutputForm]:
    """Decode a JSON (or JSON + binary) inference request body; inputs in shared memory
    are read through ``regions``, the request's claim (held until it ends; None: the
    extension is off). The form its outputs are
    asked in is taken out of its parameters (server/output_form.py)."""
    json_part, binary_part = _split_body(body, header_length)
    if not json_part.strip():
        raise InvalidRequest(
            "The request body is empty; send a JSON inference request with an 'inputs' list"
        )
    hint = ""
    if binary_part is not None:
        hint = (
            f" (the JSON header is the first {len(json_part)} bytes of the body, "
            "as Inference-Header-Content-Length says)"
        )
    parsed = _decode(_request_decoder, json_part, "inference request", hint)
    parameters = parsed.parameters or {}
    form = PLAIN
    if parameters:
        check_parameters(parameters, "The request's parameters")
        if BINARY_OUTPUT in parameters:
            form = OutputForm(binary_default=flag(parameters, BINARY_OUTPUT, "") is True)
    outputs: list[RequestedOutput] = []
    if parsed.outputs:
        outputs, form = _requested_outputs(parsed.outputs, form)
    inputs = _decode_inputs(parsed.inputs, binary_part, regions)
    request = InferenceRequest(inputs=inputs, id=parsed.id, parameters=parameters, outputs=outputs)
    if outputs:
        check_outputs(regions, outputs)
    return request, form


def _requested_outputs(
    outputs: list[_OutputBody], form: OutputForm
) -> tuple[list[RequestedOutput], OutputForm]:
    refuse_repeated_outputs([output.name for output in outputs])
    requested = []
    for output in outputs:
        if output.parameters:
            check_parameters(output.parameters, f"Output {output.name!r}: parameters")
        requested.append(RequestedOutput(output.name, output.parameters or {}))
    return requested, taken_from_outputs(requested, form)


MAX_PARAMETER_DEPTH = 32
"""How deep lists and objects may nest in a parameter value (the protocol's are scalars)."""


def check_parameters(parameters: dict[str, Any], where: str) -> None:
    """Refuse what the server could not write back if a model echoed it: integers
    beyond 64 bits (orjson cannot write them) and values nested beyond
    MAX_PARAMETER_DEPTH (orjson stops at 255 levels), each a 500 otherwise."""
    pending: list[tuple[Any, int]] = [(value, 1) for value in parameters.values()]
    while pending:  # a loop, not recursion: the depth is the client's to choose
        value, depth = pending.pop()
        if type(value) is int and not -(2**63) <= value < 2**64:
            raise InvalidRequest(f"{where} hold an integer beyond 64 bits; send it as a string")
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if depth > MAX_PARAMETER_DEPTH:
                raise InvalidRequest(
                    f"{where} nest lists or objects more than {MAX_PARAMETER_DEPTH} levels deep"
                )
            pending.extend((child, depth + 1) for child in value)


def _split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview | None]:
    if header_length is None:
        return body, None
    try:
        length = int(header_length)
    except ValueError:
        raise InvalidRequest(
            f"Inference-Header-Content-Length must be an integer, got {header_length!r}"
        ) from None
    if not 0 <= length <= len(body):
        raise InvalidRequest(
            f"Inference-Header-Content-Length {length} is outside the body of {len(body)} bytes"
        )
    view = memoryview(body)
    return body[:length], view[length:]


def _decode_inputs(
    inputs: list[_InputBody], binary: memoryview | None, regions: RegionClaim | None
) -> list[Tensor]:
    tensors = []
    offset = 0
    seen: set[str] = set()
    for item in inputs:
        if item.name in seen:
            raise repeated_input(item.name)
        seen.add(item.name)
        parameters = item.parameters or {}
        if parameters:
            check_parameters(parameters, f"Input {item.name!r}: parameters")
        size = parameters.get(BINARY_SIZE)
        if REGION in parameters:
            if item.data is not None or size is not None:
                raise InvalidRequest(
                    f"Input {item.name!r} names a shared memory region and also has data"
                )
            data = read_input(regions, item.name, item.datatype, item.shape, parameters)
            parameters = without_location(parameters)
        elif size is None:
            if item.data is None:
                raise InvalidRequest(f"Input {item.name!r} has no data")
            data = array_from_json(item.name, item.datatype, item.shape, item.data)
        else:
            data, offset = _binary_input(item, size, binary, offset)
        if BINARY_SIZE in parameters or BINARY_DATA in parameters:  # the wire's, not the model's
            parameters = {
                k: v for k, v in parameters.items() if k not in (BINARY_SIZE, BINARY_DATA)
            }
        tensors.append(Tensor(item.name, data, parameters))
    if binary is not None and offset != len(binary):
        raise InvalidRequest(
            f"The binary part of the body has {len(binary) - offset} bytes that no input claims"
        )
    return tensors


def _binary_input(
    item: _InputBody, size: Any, binary: memoryview | None, offset: int
) -> tuple[np.ndarray, int]:
    if binary is None:
        raise InvalidRequest(
            f"Input {item.name!r} has binary_data_size but the request has no "
            "Inference-Header-Content-Length header"
        )
    if type(size) is not int or size < 0:
        raise InvalidRequest(f"Input {item.name!r}: binary_data_size must be an integer >= 0")
    if item.data is not None:
        raise InvalidRequest(f"Input {item.name!r} has both data and binary_data_size")
    end = offset + size
    if end > len(binary):
        raise InvalidRequest(
            f"Input {item.name!r}: binary_data_size {size} runs past the end of the body"
        )
    return array_from_bytes(item.name, item.datatype, item.shape, binary[offset:end]), end


def decode_index_request(body: bytes) -> bool | None:
    if not body.strip():
        return None
    return _decode(_index_decoder, body, "repository index request").ready


def encode_infer_response(
    response: InferenceResponse,
    form: OutputForm = PLAIN,
    shared: dict[str, dict[str, Any]] | None = None,
) -> tuple[bytes, int | None]:
    """The response body, and the JSON header's length when binary outputs follow.

    ``form``: which outputs go as raw bytes. ``shared``: the outputs written to shared
    memory, each with the parameters it answers with instead of its data."""
    outputs = []
    chunks: list[bytes] = []
    for tensor in response.outputs:
        output: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": tensor.shape,
        }
        parameters = dict(tensor.parameters)
        if shared and tensor.name in shared:
            parameters.update(shared[tensor.name])
        elif form.is_binary(tensor.name):
            raw = array_to_bytes(tensor.data)
            parameters[BINARY_SIZE] = len(raw)
            chunks.append(raw)
        else:
            output["data"] = array_to_json(tensor.data)
        if parameters:
            output["parameters"] = parameters
        outputs.append(output)
    header = orjson.dumps(_response_head(response, outputs), option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def _response_head(response: InferenceResponse, outputs: list[dict[str, Any]]) -> dict[str, Any]:
    head: dict[str, Any] = {"model_name": response.model_name}
    if response.model_version is not None:
        head["model_version"] = response.model_version
    if response.id is not None:
        head["id"] = response.id
    if response.parameters:
        head["parameters"] = response.parameters
    head["outputs"] = outputs
    return head


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
