"""Request headers to a runtime, and response headers from it.

A runtime whose ``wants_headers`` is true (MLServer ``MLModel`` runtimes) gets the
request's headers as ``request.parameters["headers"]`` (a dict of lower-case
names: REST headers, gRPC metadata), as MLServer passes them; what it puts in
``response.parameters["headers"]`` is taken out of the answer and sent as HTTP
headers (REST) or trailing metadata (gRPC). Other runtimes pay nothing: the edge
hands a mapping that reads the headers it already holds only when asked.
"""

from __future__ import annotations

from collections.abc import Mapping

from inferd.context import NO_CONTEXT, RequestContext
from inferd.types import InferenceRequest, InferenceResponse

HEADERS = "headers"


def header_dict(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The request's headers, as the runtime gets them."""
    return dict(headers) if headers is not None else {}


def pass_headers(request: InferenceRequest, context: RequestContext) -> None:
    """Put the request's headers in its parameters (replacing any the client sent there)."""
    request.parameters[HEADERS] = header_dict(context.headers)


def take_response_headers(response: InferenceResponse, context: RequestContext) -> None:
    """Move the headers the runtime set out of the response, onto the context."""
    headers = response.parameters.pop(HEADERS, None)
    if isinstance(headers, dict) and headers and context is not NO_CONTEXT:
        context.response_headers = {str(key): str(value) for key, value in headers.items()}
