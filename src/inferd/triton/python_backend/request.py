"""``pb_utils.InferenceRequest``: a request ``execute`` receives, and a BLS request a
model sends to another model of the server (``exec``, ``async_exec``).

A BLS call goes through :mod:`inferd.model_calls`: the called model's queue,
batcher and statistics, as a client's request. It never raises for the call's
failure: an unknown model or a failing one answers a response with ``has_error()``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from inferd import model_calls
from inferd.triton.python_backend.sender import ResponseSender
from inferd.triton.python_backend.tensor import (
    InferenceResponse,
    Tensor,
    TritonModelException,
    error_of,
)
from inferd.types import InferenceRequest as InferdRequest
from inferd.types import InferenceResponse as InferdResponse
from inferd.types import RequestedOutput

SEQUENCE_START = 1
SEQUENCE_END = 2


class InferenceRequest:
    """A request: built by the server for ``execute``, or by a model for BLS."""

    def __init__(
        self,
        model_name: str = "",
        inputs: list[Tensor] | None = None,
        requested_output_names: list[str] | None = None,
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        parameters: dict[str, Any] | str | None = None,
        **_ignored: Any,  # preferred_memory, trace: no meaning on CPU in one process
    ) -> None:
        # A name read from a BYTES tensor (as_numpy()[0]) is bytes: Triton takes it too.
        self._model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self._inputs = list(inputs or [])
        self._requested = list(requested_output_names or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else parameters
        self._sender: ResponseSender | None = None
        self._cancelled = threading.Event()

    # What execute reads

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def model_name(self) -> str:
        return self._model_name

    def requested_output_names(self) -> list[str]:
        return self._requested

    def parameters(self) -> str:
        return json.dumps(self._parameters or {}, default=str)

    def get_response_sender(self) -> ResponseSender:
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender() is for requests execute received, not BLS requests"
            )
        return self._sender

    def is_cancelled(self) -> bool:
        """Whether the client went away (or the stream was closed) before the answer."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """The server's: the client left."""
        self._cancelled.set()
        if self._sender is not None:
            self._sender.cancel()

    # BLS

    def exec(self, decoupled: bool = False) -> Any:
        """Run it on ``model_name`` and wait (from a synchronous ``execute``): one
        response, or with ``decoupled`` an iterator of the model's responses."""
        request, version = self._for_call()
        if decoupled:
            return _responses(request, self._model_name, version)
        try:
            answer = model_calls.infer_from_thread(self._model_name, request, version)
        except Exception as error:
            return InferenceResponse(error=error_of(error))
        return response_of(answer)

    async def async_exec(self, decoupled: bool = False) -> Any:
        """:meth:`exec` for an ``async def execute``: ``await`` it. With ``decoupled``,
        it resolves once the model's last response arrived, to an iterator of them
        (Triton's clients iterate it with a plain ``for``)."""
        request, version = self._for_call()
        if decoupled:
            return iter([r async for r in _async_responses(request, self._model_name, version)])
        try:
            answer = await model_calls.infer(self._model_name, request, version)
        except Exception as error:
            return InferenceResponse(error=error_of(error))
        return response_of(answer)

    def _for_call(self) -> tuple[InferdRequest, str | None]:
        if not self._model_name:
            raise TritonModelException("A BLS request needs a model_name")
        parameters = dict(self._parameters or {})
        if self._correlation_id:
            parameters["sequence_id"] = self._correlation_id
            parameters["sequence_start"] = bool(self._flags & SEQUENCE_START)
            parameters["sequence_end"] = bool(self._flags & SEQUENCE_END)
        if self._timeout:
            parameters["timeout"] = self._timeout
        request = InferdRequest(
            inputs=[tensor.to_inferd() for tensor in self._inputs],
            id=self._request_id or None,
            parameters=parameters,
            outputs=[RequestedOutput(name) for name in self._requested],
        )
        version = None if self._model_version in (-1, None, "") else str(self._model_version)
        return request, version


def response_of(answer: InferdResponse) -> InferenceResponse:
    """A pb_utils response holding an inferd response's tensors (no copies)."""
    tensors = [Tensor(tensor.name, tensor.data) for tensor in answer.outputs]
    return InferenceResponse(tensors, parameters=dict(answer.parameters or {}))


def _responses(
    request: InferdRequest, model: str, version: str | None
) -> Iterator[InferenceResponse]:
    try:
        for answer in model_calls.infer_stream_from_thread(model, request, version):
            yield response_of(answer)
    except Exception as error:  # a failure is the stream's last response
        yield InferenceResponse(error=error_of(error))
        return
    yield InferenceResponse([])  # Triton's last response: empty, the final flag's


async def _async_responses(
    request: InferdRequest, model: str, version: str | None
) -> AsyncIterator[InferenceResponse]:
    try:
        async for answer in model_calls.infer_stream(model, request, version):
            yield response_of(answer)
    except Exception as error:  # a failure is the stream's last response
        yield InferenceResponse(error=error_of(error))
        return
    yield InferenceResponse([])  # Triton's last response: empty, the final flag's
