"""The OpenAPI operations of the inference and statistics routes: infer, its stream,
Triton's generate extension and its stream, and the statistics extension."""

from __future__ import annotations

import numpy as np

from inferd.server.docs.parts import LENGTH, Schema, answer, errors, op, ref
from inferd.server.rest.codec import BINARY_CONTENT_TYPE, JSON_CONTENT_TYPE

# As clients write it; the server reads it in any case.
_HEADER_LENGTH = "Inference-Header-Content-Length"
_BINARY = {"type": "string", "format": "binary"}
_INFER_DESCRIPTION = (
    "Runs the model on the request's inputs. The body is JSON, or, with the binary "
    "tensor data extension, a JSON header of Inference-Header-Content-Length bytes "
    "followed by each input's raw little-endian bytes (parameters.binary_data_size "
    "per input; BYTES elements as a 4-byte length and the bytes). Bodies may be "
    "gzip or deflate compressed (Content-Encoding). Outputs asked for with "
    "binary_data come back the same way, as application/octet-stream."
)
_INFER_STREAM_DESCRIPTION = (
    "Runs the model on a V2 request (as /infer takes it) and answers each response as "
    "a server-sent event as soon as the model yields it (a model that does not stream "
    "answers one event), outputs as JSON whatever binary_data asks. Errors before the "
    "first event are ordinary JSON answers with their status. Closing the connection "
    "stops the model."
)
_GENERATE_DESCRIPTION = (
    "The request is one flat JSON object: keys naming the model's declared inputs become "
    "those inputs (their declared datatype and shape), other keys and the entries of "
    "`parameters` become request parameters; a model that declares no inputs gets every "
    "key as an input typed from its JSON value. The answer is flat too: model_name, "
    "model_version, id, and one key per output (one element as a value, more as a list). "
    "A V2 inference request (its `inputs` a list of objects; MLServer's clients send "
    "these) is answered as {route} answers it. /generate answers a model that only "
    "streams when it sends exactly one response (400 otherwise); on /generate_stream "
    "the model's failure before its first response is an error event."
)
_GENERATE_EXAMPLE = {"text_input": "Hello", "parameters": {"max_tokens": 16}}
EVENT_STREAM_MEDIA_TYPE = "text/event-stream"


def _v2_request(example: Schema) -> Schema:
    request = {
        JSON_CONTENT_TYPE: {"schema": ref("InferenceRequest"), "example": example},
        BINARY_CONTENT_TYPE: {"schema": _BINARY},
    }
    return {"required": True, "content": request}


def _inference_errors() -> dict[str, Schema]:
    """What an inference route answers when it fails (a stream: before its first event)."""
    refusals = errors(400, 404, 413, 500, 503)
    retry = {"description": "When the server is overloaded: seconds to wait", "schema": LENGTH}
    refusals["503"]["headers"] = {"Retry-After": retry}
    return refusals


def _model_infer(operation_id: str, example: Schema) -> Schema:
    ok = answer("The outputs", ref("InferenceResponse"))
    ok["content"][BINARY_CONTENT_TYPE] = {"schema": _BINARY}
    length = "With binary outputs: the length of the JSON header"
    ok["headers"] = {_HEADER_LENGTH: {"description": length, "schema": LENGTH}}
    header = _binary_inputs_header()
    return _inference(
        operation_id, "Inference", ok, _INFER_DESCRIPTION, _v2_request(example), header
    )


def _inference(
    operation_id: str,
    summary: str,
    ok: Schema,
    description: str,
    body: Schema,
    header: Schema | None = None,
) -> Schema:
    """An inference route: its answer, or the errors an inference answers with; the
    header that gives binary inputs' length (``header``: /infer's own wording)."""
    return op(
        operation_id,
        "inference",
        summary,
        {"200": ok} | _inference_errors(),
        description=description,
        parameters=[header or _binary_inputs_header()],
        requestBody=body,
    )


def _events(what: str) -> Schema:
    return answer(
        f"Server-sent events, one per response as the model yields it: `data: <{what} "
        "JSON>`; an error after the first event ends the stream with `event: error` and "
        '`data: {"error": "<message>"}`',
        _sse_event(what),
        EVENT_STREAM_MEDIA_TYPE,
    )


def _sse_event(what: str) -> Schema:
    """One server-sent event, as SSE parsers (and schemathesis) see it: its fields."""
    return {
        "type": "object",
        "properties": {
            "event": {"type": "string", "enum": ["message", "error"]},
            "data": {
                "type": "string",
                "description": f'A {what} as JSON; with event "error", {{"error": "<message>"}}',
            },
        },
        "required": ["data"],
    }


def _binary_inputs_header() -> Schema:
    return {
        "name": _HEADER_LENGTH,
        "in": "header",
        "description": "With binary inputs: the length of the JSON header; 0: the body "
        "is the raw bytes of the model's one input (not application/json)",
        "schema": LENGTH,
    }


def _model_infer_stream(operation_id: str, example: Schema) -> Schema:
    events, body = _events("InferenceResponse"), _v2_request(example)
    return _inference(operation_id, "Streaming inference", events, _INFER_STREAM_DESCRIPTION, body)


def _generate_request(example: Schema) -> Schema:
    """A flat body, or a V2 request (JSON or binary) as /infer takes it."""
    flat_or_v2 = {"anyOf": [ref("GenerateRequest"), ref("InferenceRequest")]}
    content = {"schema": flat_or_v2, "example": _flat_example(example)}
    binary = {"schema": _BINARY}
    return {"required": True, "content": {JSON_CONTENT_TYPE: content, BINARY_CONTENT_TYPE: binary}}


def _flat_example(example: Schema) -> Schema:
    """The V2 example request as a generate body: each input under its name, its data
    nested to its shape (so "Try it out" sends what the model takes)."""
    inputs = example.get("inputs") or []
    if not inputs:
        return _GENERATE_EXAMPLE
    return {
        tensor["name"]: np.array(tensor["data"], dtype=object).reshape(tensor["shape"]).tolist()
        for tensor in inputs
    }


def _model_generate(operation_id: str, example: Schema) -> Schema:
    flat_or_v2 = {"anyOf": [ref("GenerateResponse"), ref("InferenceResponse")]}
    ok = answer("The outputs, flat (or V2, for a V2 request)", flat_or_v2)
    ok["content"][BINARY_CONTENT_TYPE] = {"schema": _BINARY}
    description = _GENERATE_DESCRIPTION.format(route="/infer")
    summary = "Generate (Triton's generate extension)"
    return _inference(operation_id, summary, ok, description, _generate_request(example))


def _model_generate_stream(operation_id: str, example: Schema) -> Schema:
    route = "/infer_stream (InferenceResponse events)"
    each = " Each response is one server-sent event."
    description = _GENERATE_DESCRIPTION.format(route=route) + each
    summary = "Streaming generate (Triton's generate extension)"
    events, body = _events("GenerateResponse"), _generate_request(example)
    return _inference(operation_id, summary, events, description, body)


def _statistics_answer() -> Schema:
    """Triton's statistics extension: every model, one model, or one version."""
    return {"200": answer("Statistics", ref("ModelStatisticsResponse"))}


def _statistics(operation_id: str, example: Schema) -> Schema:
    return op(operation_id, "statistics", "Statistics of every model", _statistics_answer())


def _model_statistics(operation_id: str, example: Schema) -> Schema:
    answers = _statistics_answer() | errors(404)
    return op(operation_id, "statistics", "A model's statistics", answers)


# Each builder is named after its operation.
INFERENCE_OPERATIONS = {
    builder.__name__.lstrip("_"): builder
    for builder in (
        _model_infer,
        _model_infer_stream,
        _model_generate,
        _model_generate_stream,
        _statistics,
        _model_statistics,
    )
}
