"""Calls to a runtime's own REST routes (MLServer's ``@custom_handler``), carried as
inference requests.

The REST server turns a request to such a route into an :class:`InferenceRequest`
whose one input is the raw body (a 0-d BYTES tensor: never stacked into a batch)
and whose parameters name the handler, the query string and the headers. It goes
to the model's instance like any request (workers included, over the same IPC,
queue and limits), and the runtime answers with the body, status and media type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferd.types import InferenceRequest, InferenceResponse, Tensor

HANDLER = "inferd_custom_handler"
QUERY = "inferd_query"
HEADERS = "headers"
BODY = "body"
STATUS = "status"
MEDIA_TYPE = "media_type"
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class HandlerCall:
    handler: str
    body: bytes
    query: str
    headers: dict[str, str]


def handler_request(call: HandlerCall) -> InferenceRequest:
    body = np.empty((), dtype=object)
    body[()] = call.body
    parameters = {HANDLER: call.handler, QUERY: call.query, HEADERS: call.headers}
    return InferenceRequest([Tensor(BODY, body)], parameters=parameters)


def is_handler_call(request: InferenceRequest) -> bool:
    """Whether the request carries a handler call (see :func:`handler_call`)."""
    return isinstance(request.parameters.get(HANDLER), str)


def handler_call(request: InferenceRequest) -> HandlerCall | None:
    """The handler call a request carries; None for an ordinary inference request."""
    if not is_handler_call(request):
        return None
    handler = request.parameters[HANDLER]
    body = request.inputs[0].data.item() if request.inputs else b""
    return HandlerCall(
        handler,
        body if isinstance(body, bytes) else b"",
        str(request.parameters.get(QUERY, "")),
        dict(request.parameters.get(HEADERS) or {}),
    )


def handler_response(body: bytes, status: int = 200, media_type: str = JSON) -> InferenceResponse:
    data = np.empty((), dtype=object)
    data[()] = body
    return InferenceResponse(
        [Tensor(BODY, data)], parameters={STATUS: status, MEDIA_TYPE: media_type}
    )


def read_handler_response(response: InferenceResponse) -> tuple[int, str, bytes]:
    """The status, media type and body a handler answered with."""
    body = response.outputs[0].data.item() if response.outputs else b""
    status = response.parameters.get(STATUS, 200)
    media_type = response.parameters.get(MEDIA_TYPE, JSON)
    return int(status), str(media_type), body if isinstance(body, bytes) else b""
