"""The error tree.

Every error a client can see is an :class:`InferdError` with a protocol-neutral
:class:`ErrorCode`. The servers map the code to an HTTP status or a gRPC code;
nothing here knows about either protocol.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.Enum):
    """What kind of failure happened, independent of the wire protocol
    (server/errors.py maps it to an HTTP status and a gRPC code)."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    PERMISSION_DENIED = "permission_denied"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"
    DEADLINE_EXCEEDED = "deadline_exceeded"


class InferdError(Exception):
    """Base of every error that is reported to a client."""

    code: ErrorCode = ErrorCode.INTERNAL
    # Seconds after which the client may retry (REST Retry-After, gRPC retry
    # pushback); None: no hint. A class default too, for errors rebuilt from IPC.
    retry_after: float | None = None

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def __init_subclass__(cls, code: ErrorCode | None = None, **kwargs: Any) -> None:
        """``class NotThere(InferdError, code=ErrorCode.NOT_FOUND)``: its code."""
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code


class InvalidRequest(InferdError, code=ErrorCode.INVALID_ARGUMENT):
    """The request is malformed or does not match what the model accepts."""


class InvalidParameter(InvalidRequest):
    """A malformed request that is about one field: ``param`` names it (a dotted path
    such as ``messages.[0].role``) and ``reason`` says what kind of fault it is in a
    word (``missing_required_parameter``, ``invalid_type``, ``invalid_value``,
    ``context_length_exceeded``), as OpenAI's errors carry them. Both cross process
    boundaries with the error (workers/ipc.py keeps plain attributes)."""

    def __init__(self, message: str, param: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.param = param
        self.reason = reason


class ModelNotFound(InferdError, code=ErrorCode.NOT_FOUND):
    """No such model (version). Worded as Triton's, which clients match on."""

    def __init__(self, name: str, version: str | None = None, hint: str = "") -> None:
        if version:
            message = f"Request for unknown model: '{name}' version {version} is not found"
        else:
            message = f"Request for unknown model: '{name}' is not found"
        super().__init__(message + hint)
        self.name = name
        self.version = version
        self.hint = hint


# Triton's answer to a load of a name its repository does not hold; tritonclient's
# model-control examples and Triton's own tests match "failed to load" and this text.
LOAD_POLL_FAILED = "failed to load '{name}', failed to poll from model repository"


class NotInRepository(ModelNotFound):
    """A repository load of a model the repository does not hold, worded as Triton's
    (``failed to load '<name>', failed to poll from model repository``), then why."""

    def __init__(self, name: str, hint: str = "") -> None:
        InferdError.__init__(
            self,
            f"{LOAD_POLL_FAILED.format(name=name)}: the model repository holds no model "
            f"{name!r} (POST /v2/repository/index lists those it holds){hint}",
        )
        self.name = name
        self.version = None
        self.hint = hint


class PermissionDenied(InferdError, code=ErrorCode.PERMISSION_DENIED):
    """The request lacks what its API group requires (restricted_apis), or the API is off."""


class ModelNotReady(InferdError, code=ErrorCode.UNAVAILABLE):
    """The model (version) is known but cannot serve now: loading, unloading or failed."""


class Overloaded(InferdError, code=ErrorCode.UNAVAILABLE):
    """The server refuses work to protect itself; the client should retry later."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message, retry_after)


class ShuttingDown(InferdError, code=ErrorCode.UNAVAILABLE):
    """The server is shutting down: it takes no new request, or it stopped one that
    did not finish before its shutdown deadline. Another replica can take it."""


class DeadlineExceeded(InferdError, code=ErrorCode.DEADLINE_EXCEEDED):
    """The request's deadline passed before it was answered."""


class InferenceTimeout(DeadlineExceeded):
    """A model call ran past its ``inference_timeout``; its worker process was killed."""


class PayloadTooLarge(InferdError, code=ErrorCode.PAYLOAD_TOO_LARGE):
    """The request body is larger than max_request_size."""


class ModelError(InferdError, code=ErrorCode.INTERNAL):
    """A failure inside the model's own code (load or predict)."""


class WorkerLost(InferdError, code=ErrorCode.UNAVAILABLE):
    """The worker process running a request died before answering."""


class WorkerLostUnread(WorkerLost):
    """The worker process a request was sent to died before it read the request: it
    never ran there, so it is no suspect of that death and may run elsewhere."""


class StatusError(InferdError):
    """An error a runtime raised with an HTTP status of its own (MLServer's
    ``MLServerError(msg, status_code)``): REST's error mapper answers with that
    status, gRPC's with the code nearest to it (server/errors.py)."""

    def __init__(self, message: str, http_status: int) -> None:
        super().__init__(message)
        self.http_status = http_status

    @property
    def code(self) -> ErrorCode:  # type: ignore[override]
        return _CODE_BY_HTTP_STATUS.get(self.http_status, _code_of_class(self.http_status))


_CODE_BY_HTTP_STATUS = {
    403: ErrorCode.PERMISSION_DENIED,
    404: ErrorCode.NOT_FOUND,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    503: ErrorCode.UNAVAILABLE,
    504: ErrorCode.DEADLINE_EXCEEDED,
}


def _code_of_class(http_status: int) -> ErrorCode:
    return ErrorCode.INVALID_ARGUMENT if 400 <= http_status < 500 else ErrorCode.INTERNAL


class ConfigurationError(Exception):
    """Settings that cannot be used. Raised at start-up or load, never per request."""
