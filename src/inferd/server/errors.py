"""What a failed request answers: one mapper per protocol.

Every REST answer to a failure comes from :func:`http_error` and every gRPC one
from :func:`grpc_error`, so a core error reads the same on every route and in a
stream: its :class:`~inferd.errors.ErrorCode` picks the status, its message is
sent as it is, and its ``retry_after`` becomes ``Retry-After`` (REST) or
``grpc-retry-pushback-ms`` (gRPC). Anything that is not an InferdError is a bug
of ours: it is logged with its traceback and the client only learns that much.
"""

from __future__ import annotations

import logging

import grpc
from starlette.requests import ClientDisconnect

from inferd.errors import ErrorCode, InferdError, StatusError
from inferd.server.rest.codec import JSON_CONTENT_TYPE, error_body
from inferd.workers import ipc

logger = logging.getLogger(__name__)

HTTP_STATUS_BY_ERROR_CODE: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 504,
}
GRPC_STATUS_BY_ERROR_CODE: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.PAYLOAD_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
}

INTERNAL_ERROR = "Internal server error; see the server logs"
# nginx's "client closed request": nobody reads the answer, but metrics show it
# apart from the server's own failures.
CLIENT_CLOSED_REQUEST = 499
CLIENT_DISCONNECTED = "The client disconnected"
RETRY_PUSHBACK_KEY = "grpc-retry-pushback-ms"
# Most bytes of a message a gRPC status carries. It travels in the grpc-message
# trailer, percent-encoded (up to three times longer), and a client drops a call whose
# headers pass 8 KiB (gRPC's soft limit) with RESOURCE_EXHAUSTED in place of the answer;
# a message can repeat what the client sent (a name), so it is cut to fit.
GRPC_MESSAGE_BYTES = 2048

HttpHeaders = list[tuple[bytes, bytes]]
_JSON_HEADERS: HttpHeaders = [(b"content-type", JSON_CONTENT_TYPE.encode())]


def http_error(error: Exception, serving: str) -> tuple[int, bytes, HttpHeaders]:
    """The status, ``{"error": ...}`` body and headers that answer ``error``.

    ``serving`` names the request in the log line of an unexpected error."""
    if isinstance(error, InferdError):
        headers = list(_JSON_HEADERS)
        if error.retry_after is not None:
            headers.append((b"retry-after", str(max(1, round(error.retry_after))).encode()))
        # A runtime's own status (MLServer's MLServerError) is answered as it is.
        if isinstance(error, StatusError):
            status = error.http_status
        else:
            status = HTTP_STATUS_BY_ERROR_CODE[error.code]
        return status, error_body(error.message), headers
    # Ours (the body reader, a request that left the queue) and Starlette's stream().
    if isinstance(error, ConnectionAbortedError | ClientDisconnect):
        return CLIENT_CLOSED_REQUEST, error_body(CLIENT_DISCONNECTED), list(_JSON_HEADERS)
    logger.error("Unexpected error serving %s", serving, exc_info=error)
    return 500, error_body(INTERNAL_ERROR), list(_JSON_HEADERS)


def portable_error(error: Exception, serving: str) -> InferdError:
    """``error`` as it crosses a private channel to be answered by another process:
    itself where the other side rebuilds it as it is (a class of ``inferd.errors``:
    workers/ipc.py ``error_from_wire``), else a StatusError of the status REST answers
    it with (and its Retry-After), so that the client gets the same answer from any
    process. ``serving`` names the call in the log line of an unexpected error."""
    if isinstance(error, InferdError) and ipc.crosses_as_itself(error):
        return error
    status, _, _ = http_error(error, serving)
    message = error.message if isinstance(error, InferdError) else str(error)
    portable = StatusError(message or type(error).__name__, status)
    portable.retry_after = error.retry_after if isinstance(error, InferdError) else None
    return portable


def grpc_error(
    error: Exception, serving: str
) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The status code, message and trailing metadata that answer ``error``.

    When overloaded, ``grpc-retry-pushback-ms`` tells gRPC clients with a retry
    policy how long to wait (what Retry-After is to REST clients)."""
    if isinstance(error, InferdError):
        metadata: tuple[tuple[str, str], ...] = ()
        if error.retry_after is not None:
            pushback = str(max(1, round(error.retry_after * 1000)))
            metadata = ((RETRY_PUSHBACK_KEY, pushback),)
        return GRPC_STATUS_BY_ERROR_CODE[error.code], _fit_for_grpc(error.message), metadata
    logger.error("Unexpected error serving %s", serving, exc_info=error)
    return grpc.StatusCode.INTERNAL, INTERNAL_ERROR, ()


def _fit_for_grpc(message: str) -> str:
    """``message``, cut to GRPC_MESSAGE_BYTES of UTF-8 (saying so) when longer."""
    encoded = message.encode("utf-8", "replace")
    if len(encoded) <= GRPC_MESSAGE_BYTES:
        return message
    note = f"... (cut; the message has {len(message)} characters)"
    kept = encoded[: GRPC_MESSAGE_BYTES - len(note)].decode("utf-8", "ignore")
    return kept + note
