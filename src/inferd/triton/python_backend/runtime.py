"""The runtime serving a Triton Python-backend ``model.py`` (``TritonPythonModel``).

Lifecycle as in Triton: the module is imported with ``triton_python_backend_utils``
served by :mod:`~inferd.triton.python_backend.pb_utils`, ``initialize(args)`` runs
at load, ``finalize()`` at unload (``auto_complete_config`` ran when the repository
was read, :mod:`~inferd.triton.python_backend.reader`). ``execute`` gets every
request of a dynamic batch at once: inferd stacks alike requests into one batch,
and this runtime cuts it back into the requests it was made of.

A plain ``def execute`` runs in a thread of this model, so BLS's blocking
``exec()`` can wait on the event loop; an ``async def execute`` runs on the loop.
A decoupled model (``model_transaction_policy { decoupled: true }``) answers
through each request's response sender; it is served by the streaming endpoints.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from inferd import model_calls
from inferd.errors import InvalidRequest, ModelError
from inferd.model import Model
from inferd.triton.python_backend import loading
from inferd.triton.python_backend.request import SEQUENCE_END, SEQUENCE_START, InferenceRequest
from inferd.triton.python_backend.reshape import Reshapes
from inferd.triton.python_backend.sender import ResponseSender, Sent
from inferd.triton.python_backend.tensor import InferenceResponse, Tensor, raised_for
from inferd.types import InferenceRequest as InferdRequest
from inferd.types import InferenceResponse as InferdResponse
from inferd.types import Tensor as InferdTensor

# Parameters of the server's own (queue, sequences): not the model's request parameters.
_SERVER_PARAMETERS = frozenset({"priority", "timeout", "binary_data_output", "headers"})


class PythonBackendModel(Model):
    """Serves one version of a Triton Python-backend model."""

    async def load(self) -> bool:
        self.config: dict[str, Any] = self.settings.extra["triton_config"]
        self.decoupled = bool(self.config.get("model_transaction_policy", {}).get("decoupled"))
        self._reshapes = Reshapes(self.config)
        self._threads = concurrent.futures.ThreadPoolExecutor(
            8, thread_name_prefix=f"inferd-{self.settings.name}-execute"
        )
        self.triton_model = loading.instantiate(self.settings)
        self._async_execute = inspect.iscoroutinefunction(self.triton_model.execute)
        initialize = getattr(self.triton_model, "initialize", None)
        if initialize is not None:
            await self._call(initialize, loading.initialize_args(self.settings, self.config))
        return True

    async def unload(self) -> None:
        finalize = getattr(getattr(self, "triton_model", None), "finalize", None)
        try:
            if finalize is not None:
                await self._call(finalize)
        finally:
            self._threads.shutdown(wait=False)

    @property
    def predicts(self) -> bool:
        return not self.decoupled  # a decoupled model answers through its streams only

    @property
    def streams(self) -> bool:
        return self.decoupled

    async def predict(self, request: InferdRequest) -> InferdResponse:
        if self.decoupled:
            raise InvalidRequest(
                f"Model {self.name!r} is decoupled (it may send any number of responses): "
                "call it through a stream (gRPC ModelStreamInfer, REST /generate_stream)"
            )
        requests = self._requests(request)
        try:
            responses = await self._call(self.triton_model.execute, requests)
        except asyncio.CancelledError:
            for each in requests:
                each.cancel()
            raise
        if responses is None:  # answered through the response senders instead
            responses = await self._sent_once(requests)
        return self._answer(responses, len(requests))

    async def predict_stream(self, request: InferdRequest) -> AsyncIterator[InferdResponse]:
        queue: asyncio.Queue[Sent] = asyncio.Queue()
        sender = ResponseSender(asyncio.get_running_loop(), queue)
        (triton_request,) = self._requests(request, [sender])
        serving = model_calls.serving(request.deadline)  # the task made here keeps it
        try:
            execute = self._call(self.triton_model.execute, [triton_request])
            execution = asyncio.ensure_future(execute)
        finally:
            model_calls.served(serving)
        try:
            async for response in _sent_responses(queue, execution, self.name):
                yield self._converted(response)
        finally:
            triton_request.cancel()
            if not execution.done():
                execution.add_done_callback(_ignore_result)

    async def _call(self, method: Any, *args: Any) -> Any:
        if inspect.iscoroutinefunction(method):
            return await method(*args)
        loop = asyncio.get_running_loop()
        calls = model_calls.ThreadCalls()  # its BLS calls: cancelled with the request
        try:
            return await loop.run_in_executor(
                self._threads, functools.partial(calls.run, method, *args)
            )
        except asyncio.CancelledError:
            calls.cancel()
            raise

    def _requests(
        self, request: InferdRequest, senders: list[ResponseSender] | None = None
    ) -> list[InferenceRequest]:
        loop = asyncio.get_running_loop()
        parts = _split(request)
        if senders is None:
            senders = [ResponseSender(loop, asyncio.Queue()) for _ in parts]
        return [self._request(part, sender) for part, sender in zip(parts, senders, strict=True)]

    def _request(self, request: InferdRequest, sender: ResponseSender) -> InferenceRequest:
        parameters = request.parameters
        flags = (SEQUENCE_START if parameters.get("sequence_start") else 0) | (
            SEQUENCE_END if parameters.get("sequence_end") else 0
        )
        requested = request.output_names or [output["name"] for output in self.config["output"]]
        triton_request = InferenceRequest(
            model_name=self.name,
            inputs=[
                Tensor(tensor.name, self._reshapes.input(tensor.name, tensor.data))
                for tensor in request.inputs
            ],
            requested_output_names=requested,
            request_id=request.id or "",
            correlation_id=parameters.get("sequence_id", 0),
            flags=flags,
            timeout=int(parameters.get("timeout") or 0),
            parameters={k: v for k, v in parameters.items() if k not in _SERVER_PARAMETERS},
        )
        triton_request._sender = sender
        return triton_request

    async def _sent_once(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        """A non-decoupled model that answered through the senders: one response each."""
        answers = []
        for request in requests:
            sender = request.get_response_sender()
            sent = [response async for response in _sent_responses(sender.queue, None, self.name)]
            if len(sent) != 1:
                raise ModelError(
                    f"Model {self.name!r} is not decoupled: it must send exactly one response "
                    f"per request, it sent {len(sent)}"
                )
            answers.append(sent[0])
        return answers

    def _answer(self, responses: Any, count: int) -> InferdResponse:
        if not isinstance(responses, list | tuple) or len(responses) != count:
            got = len(responses) if isinstance(responses, list | tuple) else type(responses)
            raise ModelError(
                f"Model {self.name!r}: execute must return a list of {count} "
                f"InferenceResponse (one per request), got {got}"
            )
        answers = [self._converted(response) for response in responses]
        if len(answers) == 1:
            return answers[0]
        return _stacked(answers)

    def _converted(self, response: Any) -> InferdResponse:
        if not isinstance(response, InferenceResponse):
            raise ModelError(
                f"Model {self.name!r}: execute must answer pb_utils.InferenceResponse, "
                f"got {type(response).__name__}"
            )
        error = response.error()
        if error is not None:
            raise raised_for(error)
        outputs = [
            InferdTensor(tensor.name(), self._reshapes.output(tensor.name(), tensor.as_numpy()))
            for tensor in response.output_tensors()
        ]
        parameters = response.parameter_dict()
        return InferdResponse(outputs=outputs, model_name=self.name, parameters=parameters)


async def _sent_responses(
    queue: asyncio.Queue[Sent], execution: asyncio.Future[Any] | None, model: str
) -> AsyncIterator[InferenceResponse]:
    """What a sender sent, until its final flag; an execute that fails ends it."""
    while True:
        reading = asyncio.ensure_future(queue.get())
        waiting = {reading} if execution is None or execution.done() else {reading, execution}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            reading.cancel()
            raise
        if not reading.done():
            reading.cancel()
            _check_execution(execution, model)  # raises when it failed
            continue
        response, final = reading.result()
        if response is not None:
            yield response
        if final:
            return


def _check_execution(execution: asyncio.Future[Any] | None, model: str) -> None:
    assert execution is not None
    result = execution.result()  # its exception, if it raised
    if result is not None:
        raise ModelError(
            f"Model {model!r} is decoupled: execute must return None (it answers through "
            f"the response sender), got {type(result).__name__}"
        )


def _ignore_result(execution: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        execution.result()


def _split(request: InferdRequest) -> list[InferdRequest]:
    """The requests a batch was stacked from (views, no copies)."""
    if len(request.batch_rows) < 2:
        return [request]
    bounds = np.cumsum(request.batch_rows)[:-1]
    pieces = [np.split(tensor.data, bounds) for tensor in request.inputs]
    return [
        InferdRequest(
            inputs=[
                InferdTensor(tensor.name, piece[index], tensor.parameters)
                for tensor, piece in zip(request.inputs, pieces, strict=True)
            ],
            id=request.id,
            parameters=request.parameters,
            outputs=request.outputs,
            deadline=request.deadline,
        )
        for index in range(len(request.batch_rows))
    ]


def _stacked(answers: list[InferdResponse]) -> InferdResponse:
    """One answer for the batch: each output's rows, request after request."""
    first = answers[0]
    outputs = []
    for index, tensor in enumerate(first.outputs):
        try:
            rows = [answer.outputs[index].data for answer in answers]
            outputs.append(InferdTensor(tensor.name, np.concatenate(rows)))
        except (IndexError, ValueError) as error:
            raise ModelError(
                f"Model {first.model_name!r}: the responses of one batch differ in their "
                f"outputs ({error}); answer every request with the same outputs"
            ) from None
    return InferdResponse(outputs=outputs, model_name=first.model_name)
