"""The REST edge: what every REST entry that runs a model goes through.

``/infer`` (the fast path, server/rest/fastpath.py), ``/infer_stream`` and
``/generate_stream`` (server/rest/sse.py), ``/generate`` (server/rest/streaming.py),
runtimes' own routes (server/rest/custom_routes.py), and the same routes behind
Ray Serve's HTTP proxy (inferd/ray.py serves this app) all turn an HTTP request
into a core call here, so each gets the same treatment:

- access: the API groups' guards (``restricted_apis``, ``model_repository_api``)
  are held here, once: :meth:`RestEdge.admit` checks ``/infer`` (which the fast
  path reaches without Starlette) and runtimes' routes; every Starlette route is
  built behind :meth:`RestEdge.guard` of its group (server/rest/api.py);
- the request's context (:meth:`RestEdge.context`): its headers as a mapping, the
  client's disconnect, its trace under the request's span (server/traced.py);
- shared memory (``shared_memory_enabled``): a request's claim on the dataplane's
  regions (:meth:`RestEdge.claim`, released by the caller once the request ends),
  inputs read through it (:meth:`RestEdge.decode_v2`), outputs written
  (:meth:`RestEdge.shared_outputs`);
- the headers a runtime set, sent back (:meth:`RestEdge.response_headers`).

It is a plain object, no layer of ASGI apps: the fast path calls it inline.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from inferd.context import RequestContext
from inferd.server.access import ApiGuard
from inferd.server.output_form import OutputForm
from inferd.server.rest.bodies import BodyReader
from inferd.server.rest.codec import HEADER_LENGTH, decode_infer_request
from inferd.server.rest.codec_raw import decode_raw_request
from inferd.server.rest.fastpath import (
    Receive,
    body_headers,
    receive_chunks,
    wait_for_disconnect,
)
from inferd.server.routes import INFERENCE
from inferd.serving.dataplane import DataPlane
from inferd.triton.shm import RegionClaim, write_requested_outputs
from inferd.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferd.observability.tracing import Tracing

AsgiHeaders = dict[bytes, bytes]
_HEADER_LENGTH = HEADER_LENGTH.encode()


class HttpHeaders(Mapping[str, str]):
    """A request's ASGI headers as text, decoded only if a runtime asks for them
    (serving/runtime_headers.py)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: AsgiHeaders) -> None:
        self._raw = raw

    def __getitem__(self, key: str) -> str:
        return self._raw[key.encode("latin-1")].decode("latin-1")

    def __iter__(self) -> Iterator[str]:
        return (key.decode("latin-1") for key in self._raw)

    def __len__(self) -> int:
        return len(self._raw)


class RestEdge:
    """Turns an HTTP request into a core call, and the core's answer back."""

    def __init__(
        self,
        dataplane: DataPlane,
        body_reader: BodyReader,
        guards: dict[str, ApiGuard],
        tracing: Tracing | None = None,
    ) -> None:
        """``guards``: the API groups' guards (server/access.py), none for an open group.
        ``tracing``: a model's work noted under the request's span (server/traced.py
        opens it)."""
        self.dataplane = dataplane
        self.body_reader = body_reader
        self.guards = guards
        self.tracing = tracing
        self._inference_guard = guards.get(INFERENCE)

    # Access

    def guard(self, group: str) -> ApiGuard | None:
        """The guard of an API group (None: open)."""
        return self.guards.get(group)

    def admit(self, headers: AsgiHeaders) -> None:
        """PermissionDenied unless the request may run a model (the inference group)."""
        guard = self._inference_guard
        if guard is not None:
            guard.check_headers(headers)

    # Requests

    async def read_body(self, headers: AsgiHeaders, receive: Receive) -> bytes:
        """The whole body, within max_request_size (gzip read too)."""
        return await self.body_reader.read(receive_chunks(receive), body_headers(headers))

    def claim(self) -> RegionClaim | None:
        """A request's claim on the shared memory regions (None: the extension is off):
        the regions it uses are held until the caller releases it (triton/shm.py)."""
        regions = self.dataplane.shared_memory
        return regions.claim() if regions is not None else None

    def decode_v2(
        self,
        body: bytes,
        headers: AsgiHeaders,
        name: str,
        version: str | None,
        claim: RegionClaim | None,
    ) -> tuple[InferenceRequest, OutputForm]:
        """A V2 request (JSON, or JSON and binary tensors), shared-memory inputs read
        through ``claim``, and the form its outputs are asked in (server/output_form.py);
        a raw binary request (its JSON header 0 bytes) as model ``name``'s one declared input."""
        header_length = headers.get(_HEADER_LENGTH)
        if header_length is not None and header_length.strip() == b"0":
            declared = self.dataplane.model_metadata(name, version).inputs  # 404/503 first
            batched = self.dataplane.model_config(name, version).get("max_batch_size", 0) > 0
            content_type = headers.get(b"content-type")
            return decode_raw_request(body, name, declared, content_type, batched)
        return decode_infer_request(
            body,
            header_length.decode("latin-1") if header_length is not None else None,
            claim,
        )

    def context(
        self, name: str, version: str | None, headers: AsgiHeaders, receive: Receive | None
    ) -> RequestContext:
        """The request's context. ``receive`` (its body read already) is watched for
        the client leaving while the request waits; None: the caller watches it."""
        tracing = self.tracing
        return RequestContext(
            disconnected=(
                functools.partial(wait_for_disconnect, receive) if receive is not None else None
            ),
            trace=tracing.inference(name, version) if tracing is not None else None,
            headers=HttpHeaders(headers),
        )

    # Answers

    def answered(
        self,
        context: RequestContext,
        request: InferenceRequest,
        response: InferenceResponse,
        claim: RegionClaim | None,
    ) -> dict[str, dict[str, Any]] | None:
        """Note a request's answer (its model work under the request's span); its
        outputs in shared memory, as :meth:`shared_outputs`."""
        self.traced(context, response)
        return self.shared_outputs(request, response, claim)

    def traced(self, context: RequestContext, response: InferenceResponse) -> None:
        """Add the request's model work under its span (a stream: once, at its end)."""
        trace, tracing = context.trace, self.tracing
        if trace is not None and tracing is not None:
            tracing.answered(trace, response)

    @staticmethod
    def shared_outputs(
        request: InferenceRequest, response: InferenceResponse, claim: RegionClaim | None
    ) -> dict[str, dict[str, Any]] | None:
        """Write the outputs the client asked for in its shared memory regions there
        (those ``claim`` holds); what the encoder says of them (None: none asked for)."""
        return write_requested_outputs(claim, request, response)

    @staticmethod
    def response_headers(
        context: RequestContext, headers: list[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes]]:
        """``headers`` and those a runtime set on its answer (serving/runtime_headers.py)."""
        if context.response_headers:
            headers += [
                (key.encode("latin-1"), value.encode("latin-1"))
                for key, value in context.response_headers.items()
            ]
        return headers
