"""The endpoints of ``/infer_stream``, ``/generate`` and ``/generate_stream``.

- ``/infer_stream``: a V2 request (JSON, or JSON + binary tensor data), answered
  with server-sent events of V2 JSON responses (server/rest/sse.py).
- ``/generate``: Triton's generate extension, a flat JSON request answered with one
  flat JSON object (server/rest/codec_generate.py); a model that only streams (Triton's
  decoupled models) must send exactly one response. ``/generate_stream``: the same
  objects as server-sent events; the model's failure before its first response is an
  error event too, as in Triton (a request refused before the model runs is not).
  Both also take a V2 request, as MLServer does (its generate routes are aliases of
  infer and infer_stream), answered as ``/infer`` and ``/infer_stream`` answer it.

Each is an ASGI endpoint of its Starlette route (server/rest/api.py), so CORS and the
per-route metrics apply to them as to every other route; each reaches the core
through the REST edge (server/rest/edge.py), as /infer does.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING

from inferd.context import RequestContext
from inferd.errors import InvalidRequest
from inferd.server.output_form import PLAIN
from inferd.server.rest.codec import (
    HEADER_LENGTH,
    JSON_CONTENT_TYPE,
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
)
from inferd.server.rest.sse import BodyEndpoint, Encoder, EventStreamEndpoint, model_of
from inferd.serving.dataplane import DataPlane
from inferd.triton.shm import RegionClaim
from inferd.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferd.server.rest.edge import RestEdge

_HEADER_LENGTH = HEADER_LENGTH.encode()
_JSON_TYPE = (b"content-type", JSON_CONTENT_TYPE.encode())
# Triton's words for a /generate whose model sent more or fewer than one response.
_EXACTLY_ONE = "generate expects model to produce exactly 1 response"


class StreamedV2Bodies:
    """V2 requests (binary tensor data accepted), each response as V2 JSON; tensors
    in shared memory as /infer takes and answers them (through the edge)."""

    def __init__(self, edge: RestEdge) -> None:
        self.edge = edge

    def decode(
        self, body: bytes, headers: dict[bytes, bytes], name: str, version: str | None
    ) -> tuple[InferenceRequest, Encoder]:
        # Events are text: every output is answered in JSON, whatever binary_data asks
        # (tritonclient sets binary_data_output unless told not to).
        # The regions it uses are held as long as its encoder lives: the stream's.
        claim = self.edge.claim()
        try:
            request, form = self.edge.decode_v2(body, headers, name, version, claim)
        except Exception:
            if claim is not None:
                claim.release()
            raise
        if form.classes:
            return request, functools.partial(self.encode_classes, claim, form.classes)
        return request, functools.partial(self.encode, claim)

    def encode_classes(
        self,
        claim: RegionClaim | None,
        classes: dict[str, int],
        response: InferenceResponse,
        request: InferenceRequest,
    ) -> bytes:
        return self.encode(claim, self.edge.dataplane.classified(response, classes), request)

    def encode(
        self, claim: RegionClaim | None, response: InferenceResponse, request: InferenceRequest
    ) -> bytes:
        shared = self.edge.shared_outputs(request, response, claim)
        content, _ = encode_infer_response(response, PLAIN, shared)
        return content


class FlatBodies:
    """Flat generate objects, read against the model's declared inputs."""

    def __init__(self, dataplane: DataPlane) -> None:
        # Read per request: the app's routes are built before (and without) a
        # running dataplane, e.g. to list them for the docs.
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

    def __init__(self, edge: RestEdge, infer: InferEndpoint) -> None:
        super().__init__(edge, FlatBodies(edge.dataplane))
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
        try:
            request, encode = self.bodies.decode(body, headers, name, version)
            # As /infer: a client that leaves while its request is queued takes it out.
            context = self.edge.context(name, version, headers, receive)
            if self.dataplane.model_predicts(name, version):
                response = await self.dataplane.infer(name, version, request, context)
            else:
                response = await self._only_response(name, version, request, context)
            self.edge.traced(context, response)
            content = encode(response, request)
        except Exception as error:
            await send_error(send, error, serving)
            return
        answer = self.edge.response_headers(context, [_JSON_TYPE])
        await send_whole(send, 200, answer, content)

    async def _only_response(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> InferenceResponse:
        """The one response of a model that only streams (Triton's decoupled models):
        /generate answers one, so a second stops the model and is refused, as is none."""
        answers: list[InferenceResponse] = []
        responses = self.dataplane.infer_stream(name, version, request, context)
        async with contextlib.aclosing(responses):
            async for ready in responses:
                answers += ready
                if len(answers) > 1:
                    raise InvalidRequest(
                        f"{_EXACTLY_ONE}: model {name!r} sent more than one response; use "
                        f"POST /v2/models/{name}/generate_stream"
                    )
        if not answers:
            raise InvalidRequest(
                f"{_EXACTLY_ONE}: model {name!r} sent no response; use "
                f"POST /v2/models/{name}/generate_stream to stream what it sends"
            )
        return answers[0]


def stream_endpoints(edge: RestEdge, infer: InferEndpoint) -> dict[str, ASGIApp]:
    """The endpoints of the streaming and generate routes, by handler name (routes.py);
    ``infer`` answers /generate's V2 requests."""
    v2 = StreamedV2Bodies(edge)
    either = GenerateStreamBodies(v2, FlatBodies(edge.dataplane))
    return {
        "infer_stream": EventStreamEndpoint(edge, v2),
        "generate": GenerateEndpoint(edge, infer),
        "generate_stream": EventStreamEndpoint(edge, either, model_errors_as_events=True),
    }
