"""Tiny runtimes the integration tests serve in-process (``parallel_workers: 0``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import ClassVar

import numpy as np

from inferd import InferenceRequest, InferenceResponse, Model, Tensor


class Echo(Model):
    """Returns every input unchanged as an output of the same name."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        outputs = [Tensor(t.name, t.data, dict(t.parameters)) for t in request.inputs]
        return InferenceResponse(outputs=outputs, parameters=dict(request.parameters))


class Fails(Model):
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        raise ValueError("this model always fails")


class Gated(Model):
    """Holds each request until the test opens :attr:`gate`; records what it ran.

    Its state is the class's: the test that serves it resets it (``reset``) in its
    own event loop, and reaches it without a handle on the loaded instance."""

    gate: ClassVar[asyncio.Event] = asyncio.Event()
    running: ClassVar[int] = 0
    ran: ClassVar[list[float]] = []

    @classmethod
    def reset(cls) -> None:
        cls.gate = asyncio.Event()
        cls.running = 0
        cls.ran = []

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = request.input("x").data
        Gated.running += 1
        try:
            await Gated.gate.wait()
        finally:
            Gated.running -= 1
        Gated.ran.extend(float(value) for value in np.ravel(x))
        return InferenceResponse(outputs=[Tensor("y", x * 2)])


class Tokens(Model):
    """Streams ``count`` responses (request parameter, default 3), ``delay`` seconds
    apart: ``text_output`` "<prefix><i>" (prefix: the ``text_input`` input, else
    "tok") and ``index`` i. With ``fail_at`` it raises instead of response i.

    The request ids of the streams whose generator has stopped (ended, failed or
    closed) land in :attr:`stopped`, from the generator's ``finally``."""

    stopped: ClassVar[list[str | None]] = []

    @classmethod
    def reset(cls) -> None:
        cls.stopped = []

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        plan = _TokenPlan(request)
        try:
            for index in range(plan.count):
                if index:
                    await asyncio.sleep(plan.delay)
                yield plan.response(index)
        finally:
            Tokens.stopped.append(request.id)


class ThreadTokens(Model):
    """Tokens as a plain generator (run in a thread of the model's own with
    ``threads_per_worker`` > 1); records into Tokens.stopped too."""

    def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        plan = _TokenPlan(request)
        try:
            for index in range(plan.count):
                if index:
                    time.sleep(plan.delay)
                yield plan.response(index)
        finally:
            Tokens.stopped.append(request.id)


class _TokenPlan:
    def __init__(self, request: InferenceRequest) -> None:
        parameters = request.parameters
        self.count = int(parameters.get("count", 3))
        self.delay = float(parameters.get("delay", 0))
        self.fail_at = parameters.get("fail_at")
        self.prefix = "tok"
        for tensor in request.inputs:
            if tensor.name == "text_input":
                self.prefix = np.ravel(tensor.data)[0].decode()
            elif tensor.name == "max_tokens":
                self.count = int(np.ravel(tensor.data)[0])

    def response(self, index: int) -> InferenceResponse:
        if index == self.fail_at:
            raise ValueError(f"the stream broke at {index}")
        text = np.array([f"{self.prefix}{index}".encode()], dtype=np.object_)
        outputs = [Tensor("text_output", text), Tensor("index", np.array([index], np.int64))]
        return InferenceResponse(outputs=outputs)


class ServesText(Model):
    """Answers the text of the file at its ``uri`` (read at load; a text starting with
    "fail" fails the load). A request with the parameter ``hold`` waits for
    :attr:`gate` first: a request in flight while the model is swapped."""

    gate: ClassVar[asyncio.Event] = asyncio.Event()

    async def load(self) -> bool:
        self.text = self.settings.uri.read_text()
        if self.text.startswith("fail"):
            raise RuntimeError(f"the artifact says {self.text!r}")
        return True

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        if request.parameters.get("hold"):
            await ServesText.gate.wait()
        return InferenceResponse(outputs=[Tensor("text", np.array([self.text], dtype=object))])
