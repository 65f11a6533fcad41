"""The endpoints of ``/infer_stream``, ``/generate`` and ``/generate_stream``.

- ``/infer_stream``: a V2 request (JSON, or JSON + binary tensor data), answered
  with server-sent events of V2 JSON responses (server/rest/sse.py).
- ``/generate``: Triton's generate extension, a flat JSON request answered with one
  flat JSON object (server/rest/codec_generate.py); ``/generate_stream``: the same
  objects as server-sent events. Both also take a V2 request, as MLServer does (its
  generate routes are aliases of infer and infer_stream), answered as ``/infer`` and
  ``/infer_stream`` answer it.

Each is an ASGI endpoint of its Starlette route (server/rest/api.py), so CORS and the
per-route metrics apply to them as to every other route.
"""

from __future__ import annotations

import functools

from inferd.context import RequestContext
from inferd.server.rest.bodies import BodyReader
from inferd.server.rest.codec import (
    HEADER_LENGTH,
    JSON_CONTENT_TYPE,
    decode_infer_request,
    encode_infer_response,
)
from inferd.server.rest.codec_generate import (
    decode_generate_request,
    encode_generate_response,
    is_v2_body,
)
from inferd.server.rest.fastpath import (
    ASGIApp,
    InferEndpoint,
    Receive,
    Scope,
    Send,
    send_error,
    send_whole,
    wait_for_disconnect,
)
from inferd.server.rest.sse import BodyEndpoint, Encoder, EventStreamEndpoint, model_of
from inferd.serving.dataplane import DataPlane
from inferd.triton.shm import write_outputs
from inferd.types import InferenceRequest, InferenceResponse

_HEADER_LENGTH = HEADER_LENGTH.encode()
_JSON_TYPE = (b"content-type", JSON_CONTENT_TYPE.encode())


class StreamedV2Bodies:
    """V2 requests (binary tensor data accepted), each response as V2 JSON; tensors
    in the dataplane's shared memory regions (None: off) as /infer takes and answers them."""

    def __init__(self, dataplane: DataPlane) -> None:
        # Read per request, as /infer does: the app's routes are built before (and
        # without) a running dataplane, e.g. to list them for the docs.
        self.dataplane = dataplane

    def decode(
        self, body: bytes, headers: dict[bytes, bytes], name: str, version: str | None
    ) -> tuple[InferenceRequest, Encoder]:
        header_length = headers.get(_HEADER_LENGTH)
        request = decode_infer_request(
            body,
            header_length.decode("latin-1") if header_length is not None else None,
            self.dataplane.shared_memory,
        )
        _answer_in_json(request)
        return request, self.encode

    def encode(self, response: InferenceResponse, request: InferenceRequest) -> bytes:
        shared = None
        regions = self.dataplane.shared_memory
        if regions is not None and request.outputs:
            shared = write_outputs(regions, request.outputs, response.outputs)
        content, _ = encode_infer_response(response, request, shared)  # JSON: _answer_in_json
        return content


class FlatBodies:
    """Flat generate objects, read against the model's declared inputs."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    def decode(
        self, body: bytes, headers: dict[bytes, bytes], name: str, version: str | None
    ) -> tuple[InferenceRequest, Encoder]:
        declared = self.dataplane.model_metadata(name, version).inputs  # 404/503 first
        return decode_generate_request(body, declared), self.encode

    def encode(self, response: InferenceResponse, request: InferenceRequest) -> bytes:
        return encode_generate_response(response)


class GenerateStreamBodies:
    """``/generate_stream``: a V2 request answered with V2 events (MLServer's
    ``infer_stream`` alias), any other body as a flat one."""

    def __init__(self, v2: StreamedV2Bodies, flat: FlatBodies) -> None:
        self.v2 = v2
        self.flat = flat

    def decode(
        self, body: bytes, headers: dict[bytes, bytes], name: str, version: str | None
    ) -> tuple[InferenceRequest, Encoder]:
        bodies = self.v2 if is_v2_body(body, _HEADER_LENGTH in headers) else self.flat
        return bodies.decode(body, headers, name, version)


class GenerateEndpoint(BodyEndpoint):
    """``/generate``: one flat request, one flat answer; a V2 request is answered as
    ``/infer`` answers it (MLServer's alias)."""

    def __init__(self, dataplane: DataPlane, body_reader: BodyReader, infer: InferEndpoint) -> None:
        super().__init__(dataplane, body_reader, FlatBodies(dataplane))
        self.infer = infer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name, version = model_of(scope)
        serving = f"generate on model {name!r}"
        try:
            headers, body = await self.read_body(scope, receive)
        except Exception as error:
            await send_error(send, error, serving)
            return
        if is_v2_body(body, _HEADER_LENGTH in headers):
            await self.infer.answer(name, version, headers, receive, send, body)
            return
        # As /infer: a client that leaves while its request is queued takes it out.
        disconnected = functools.partial(wait_for_disconnect, receive)
        context = RequestContext(disconnected=disconnected, headers=headers)
        try:
            request, encode = self.bodies.decode(body, headers, name, version)
            response = await self.dataplane.infer(name, version, request, context)
            content = encode(response, request)
        except Exception as error:
            await send_error(send, error, serving)
            return
        answer = [_JSON_TYPE]
        for key, value in (context.response_headers or {}).items():  # runtime_headers.py
            answer.append((key.encode("latin-1"), value.encode("latin-1")))
        await send_whole(send, 200, answer, content)


def stream_endpoints(
    dataplane: DataPlane, body_reader: BodyReader, infer: InferEndpoint
) -> dict[str, ASGIApp]:
    """The endpoints of the streaming and generate routes, by handler name (routes.py);
    ``infer`` answers /generate's V2 requests."""
    v2 = StreamedV2Bodies(dataplane)
    either = GenerateStreamBodies(v2, FlatBodies(dataplane))
    return {
        "infer_stream": EventStreamEndpoint(dataplane, body_reader, v2),
        "generate": GenerateEndpoint(dataplane, body_reader, infer),
        "generate_stream": EventStreamEndpoint(dataplane, body_reader, either),
    }


def _answer_in_json(request: InferenceRequest) -> None:
    """Events are text: drop the binary tensor extension's output flags (tritonclient
    sets binary_data_output unless asked not to), so every output comes back as JSON."""
    request.parameters.pop("binary_data_output", None)
    for output in request.outputs:
        output.parameters.pop("binary_data", None)
