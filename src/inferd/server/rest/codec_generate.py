"""Flat generate bodies (Triton's generate extension) <-> core types.

``/generate`` and ``/generate_stream`` take one flat JSON object whose keys are
input names, e.g. ``{"text_input": "hi", "max_tokens": 8}``, and answer flat
objects, ``{"model_name": ..., "model_version": ..., "text_output": "..."}``.

Requests. A key that names one of the model's declared inputs becomes that input,
of its declared datatype and shape (a string is one BYTES element, a number or
bool one element, a list its array; ``-1`` dimensions take what the value holds).
Every other key, and the entries of the optional ``"parameters"`` object (which
win over a key of the same name), become request parameters; ``"id"`` (a string)
is the request's id unless an input has that name. A model that declares no inputs
gets every key as an input, typed from its JSON value: string -> BYTES [1],
integer -> INT64 [1], float -> FP64 [1], bool -> BOOL [1], a list -> an array of
its shape (strings BYTES, bools BOOL, integers INT64, any float FP64); a value
that cannot be a tensor (an object, null) becomes a request parameter; a body that
gives no input at all is refused (400). A model's declared inputs are enforced on
what the body became, as on every request (serving/declared_inputs.py).

Answers. Each output becomes one key: a one-element BYTES output a string, a
one-element numeric or BOOL output a number or bool, anything else a list nested
as the output's shape.

V2 bodies. MLServer serves ``/generate`` and ``/generate_stream`` as aliases of
``/infer`` and ``/infer_stream``, so its clients send V2 inference requests there.
:func:`is_v2_body` tells them apart: a body whose ``inputs`` is a list of objects
(which no flat body can be: a flat list holds strings, bools or numbers), or one
with binary tensor data, is a V2 request, answered with V2 responses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from math import prod
from typing import Any

import msgspec
import numpy as np
import orjson
from msgspec import UNSET, UnsetType

from inferd.errors import InvalidRequest
from inferd.json_refusals import not_json_reason
from inferd.server.rest.codec import check_parameters
from inferd.server.rest.responses import Parameters
from inferd.tensors.encoding import array_from_json, array_to_json
from inferd.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    Tensor,
    repeated_input,
)

PARAMETERS_KEY = "parameters"
ID_KEY = "id"
# The keys an answer keeps for the request's identity: no output may take them.
IDENTITY_KEYS = ("model_name", "model_version", ID_KEY)

_object_decoder = msgspec.json.Decoder(dict[str, Any])


class _V2Probe(msgspec.Struct):
    """Only the ``inputs`` of a body, undecoded: the other keys are skipped."""

    inputs: msgspec.Raw = msgspec.Raw(b"")


_probe_decoder = msgspec.json.Decoder(_V2Probe)


# ---- for the OpenAPI document (server/docs/openapi.py) ----


class GenerateRequestBody(msgspec.Struct):
    """One key per input the model declares, its value a string, number, bool or
    (nested) list; other keys are request parameters. A model that declares no
    inputs takes every key as an input typed from its value. ``id`` (a string)
    is echoed in the answers."""

    parameters: Parameters | UnsetType = UNSET


class GenerateResponseBody(msgspec.Struct):
    """The model's identity, then one key per output: a one-element output as a
    string, number or bool, a larger one as a list nested as its shape."""

    model_name: str
    model_version: str | UnsetType = UNSET
    id: str | UnsetType = UNSET


def decode_generate_request(
    body: bytes, declared_inputs: Sequence[MetadataTensor]
) -> InferenceRequest:
    """The request a flat generate body stands for, given the model's declared inputs."""
    fields = _decode_object(body)
    declared = {tensor.name: tensor for tensor in declared_inputs}
    _refuse_repeated_keys(body, fields, declared)
    parameters = fields.pop(PARAMETERS_KEY, {})
    if not isinstance(parameters, dict):
        raise InvalidRequest(f'"parameters" must be an object, got {_json_type(parameters)}')
    request_id = None
    if ID_KEY not in declared and isinstance(fields.get(ID_KEY), str):
        request_id = fields.pop(ID_KEY)
    inputs: list[Tensor] = []
    extra: dict[str, Any] = {}
    for key, value in fields.items():
        spec = declared.get(key)
        if spec is not None:
            inputs.append(_declared_input(spec, value))
        elif declared or isinstance(value, dict) or value is None:
            extra[key] = value
        else:
            inputs.append(_inferred_input(key, value))
    if not inputs and not declared:  # with declared inputs, serving/ names the one missing
        raise InvalidRequest(
            "The generate request gives no inputs; send a JSON object whose keys "
            'are the model\'s input names, such as {"text_input": "..."}'
        )
    merged = extra | parameters
    if merged:
        check_parameters(merged, "The request's parameters")
    return InferenceRequest(inputs=inputs, id=request_id, parameters=merged)


def encode_generate_response(response: InferenceResponse) -> bytes:
    """The flat JSON answer for ``response``."""
    answer: dict[str, Any] = {"model_name": response.model_name}
    if response.model_version is not None:
        answer["model_version"] = response.model_version
    if response.id is not None:
        answer[ID_KEY] = response.id
    for tensor in response.outputs:
        if tensor.name in IDENTITY_KEYS:
            raise InvalidRequest(
                f"Model {response.model_name!r} has an output named {tensor.name!r}, which "
                "flat generate answers keep for the request's identity; use /infer instead"
            )
        answer[tensor.name] = flat_value(tensor.data)
    return orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)


def flat_value(array: np.ndarray) -> Any:
    """One element as a JSON scalar, anything else as a list nested as ``array``."""
    values = array_to_json(array)  # flat: str for BYTES, native numbers otherwise
    if array.size == 1:
        return values[0] if isinstance(values, list) else values[0].item()
    if isinstance(values, list):  # BYTES: nest the strings as the output's shape
        nested = np.empty(len(values), dtype=object)
        nested[:] = values
        return nested.reshape(array.shape).tolist()
    return values.reshape(array.shape)  # orjson writes numpy arrays nested


# ---- requests ----


def is_v2_body(body: bytes, binary: bool) -> bool:
    """Whether a generate body is a V2 inference request (see the module's doc);
    ``binary``: it came with an Inference-Header-Content-Length header."""
    if binary:
        return True
    try:
        inputs = bytes(_probe_decoder.decode(body).inputs)
    except (msgspec.MsgspecError, RecursionError, UnicodeDecodeError):
        return False  # not a JSON object: the flat decoder says what is wrong
    return inputs.startswith(b"[") and inputs[1:].lstrip().startswith(b"{")


def _decode_object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise InvalidRequest(
            'The request body is empty; send a JSON object such as {"text_input": "..."}'
        )
    try:
        fields: dict[str, Any] = _object_decoder.decode(body)
    except RecursionError:  # msgspec follows Python's recursion limit
        raise InvalidRequest("Invalid generate request: the JSON is nested too deeply") from None
    except msgspec.ValidationError:
        raise InvalidRequest(
            "Invalid generate request: send one JSON object whose keys are the model's "
            'input names, such as {"text_input": "..."}'
        ) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as error:  # see json_refusals.py
        raise InvalidRequest(f"Invalid generate request: {not_json_reason(body, error)}") from None
    return fields


def _refuse_repeated_keys(body: bytes, fields: dict[str, Any], declared: dict[str, Any]) -> None:
    """A key given twice is refused: the decoder would keep the last value quietly,
    where Triton refuses an input given twice (``input 'X' already exists in request``)."""
    if not _has_colons(body, len(fields) + 1):
        return  # every colon is one of the decoded keys': no key was written twice
    seen: set[str] = set()
    for key in _top_level_keys(body):
        if key not in seen:
            seen.add(key)
        elif key in declared or not (declared or key in (PARAMETERS_KEY, ID_KEY)):
            raise repeated_input(key)
        else:
            raise InvalidRequest(f"Invalid generate request: key '{key}' appears more than once")


def _has_colons(body: bytes, count: int) -> bool:
    """Whether ``body`` holds at least ``count`` colons (find is memchr: bytes.count
    takes ten times as long on a long prompt)."""
    at = -1
    for _ in range(count):
        at = body.find(b":", at + 1)
        if at < 0:
            return False
    return True


def _top_level_keys(body: bytes) -> list[str]:
    """The keys of the body's object as written, repeats included (the body already
    decoded once: this slower decode runs only when a key may repeat)."""
    objects: list[list[str]] = []  # each object's keys, innermost first, the body's last

    def keys_of(pairs: list[tuple[str, Any]]) -> None:
        objects.append([key for key, _ in pairs])

    try:
        json.loads(body, object_pairs_hook=keys_of)
    except (ValueError, RecursionError):
        return []  # what msgspec took and json does not (NaN aside, none known): no check
    return objects[-1] if objects else []


def _declared_input(spec: MetadataTensor, value: Any) -> Tensor:
    """``value`` as the input the model declares: its datatype, its shape."""
    if value is None or isinstance(value, dict):
        raise InvalidRequest(
            f"Input {spec.name!r} must be a string, number, bool or list, got {_json_type(value)}"
        )
    data = value if isinstance(value, list) else [value]
    shape = fit_shape(spec.name, _json_shape(data), spec.shape)
    # fit_shape may lay nested values out in the declared shape: their nesting is not the shape.
    array = array_from_json(spec.name, spec.datatype, shape, data, match_nesting=False)
    content_type = spec.parameters.get("content_type")
    parameters = {"content_type": content_type} if content_type is not None else {}
    return Tensor(spec.name, array, parameters)


def fit_shape(name: str, given: tuple[int, ...], declared: Sequence[int]) -> list[int]:
    """The shape a value of shape ``given`` takes as an input declared ``declared``.

    A value that already fits (same rank; each fixed dimension equal) keeps its
    shape. Otherwise its elements are laid out in the declared shape: fixed
    dimensions as declared, the last ``-1`` takes what is left, other ``-1`` are 1.
    """
    if len(given) == len(declared) and all(
        d in (-1, g) for g, d in zip(given, declared, strict=True)
    ):
        return list(given)
    size = prod(given)
    shape = [1 if dim < 0 else dim for dim in declared]
    free = [index for index, dim in enumerate(declared) if dim < 0]
    fixed = prod(shape)
    if free and fixed > 0 and size % fixed == 0:
        shape[free[-1]] = size // fixed
    if prod(shape) != size:
        raise InvalidRequest(
            f"Input {name!r}: {size} value(s) do not fit its declared shape {list(declared)}"
        )
    return shape


def _inferred_input(name: str, value: Any) -> Tensor:
    """``value`` as a tensor typed from the JSON (the model declares no inputs)."""
    data = value if isinstance(value, list) else [value]
    shape = _json_shape(data)
    datatype = _datatype_of(name, data)
    return Tensor(name, array_from_json(name, datatype, shape, data))


def _datatype_of(name: str, data: list[Any]) -> str:
    """BYTES, BOOL, INT64 or FP64: what every leaf of ``data`` is."""
    kinds: set[type] = set()
    pending = [data]
    while pending:  # a loop, not recursion: the depth is the client's to choose
        items = pending.pop()
        for item in items:
            if isinstance(item, list):
                pending.append(item)
            else:
                kinds.add(type(item))
    if kinds <= {str} and kinds:
        return "BYTES"
    if kinds <= {bool} and kinds:
        return "BOOL"
    if kinds <= {int}:
        return "INT64"  # an empty list too: nothing to say otherwise
    if kinds <= {int, float}:
        return "FP64"
    found = ", ".join(sorted({_JSON_TYPES.get(kind, kind.__name__) for kind in kinds}))
    raise InvalidRequest(
        f"Input {name!r} holds {found}; a list must hold only strings, only bools or only numbers"
    )


def _json_shape(data: list[Any]) -> tuple[int, ...]:
    """The shape of nested lists, read along their first elements (ragged lists are
    caught when the data is decoded against it)."""
    dims = []
    level: Any = data
    while isinstance(level, list):
        dims.append(len(level))
        if not level:
            break
        level = level[0]
    return tuple(dims)


_JSON_TYPES = {
    str: "strings",
    bool: "bools",
    int: "numbers",
    float: "numbers",
    dict: "objects",
    type(None): "nulls",
}


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a bool"}.get(
        type(value), "null" if value is None else "a number"
    )
