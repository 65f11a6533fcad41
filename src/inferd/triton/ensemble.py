"""Triton ensembles (``platform: "ensemble"``): steps that call the server's models.

Each step maps ensemble tensors to a composing model's inputs (``input_map``: the
model's input name -> the ensemble tensor) and its outputs back to ensemble
tensors (``output_map``). Steps run as a graph: each starts as soon as the
tensors it reads exist, so independent steps run at once. Every step is an
ordinary call through :mod:`inferd.model_calls` (the composing model's queue,
batcher and statistics); tensors pass between steps as the same numpy arrays.
A failing step fails the request with the step and the model named.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from inferd import model_calls
from inferd.errors import ConfigurationError, InferdError, ModelError
from inferd.model import Model
from inferd.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

# Request parameters a step passes on to its model (the rest are the ensemble's).
_PASSED_ON = ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout")


class EnsembleModel(Model):
    async def load(self) -> bool:
        config = self.settings.extra["triton_config"]
        self.steps: list[dict[str, Any]] = config["ensemble_scheduling"]["step"]
        self.output_names = [output["name"] for output in config.get("output", [])]
        inputs = {tensor["name"] for tensor in config.get("input", [])}
        _check_graph(self.name, self.steps, inputs, self.output_names)
        return True

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        tensors = {tensor.name: tensor.data for tensor in request.inputs}
        parameters = {k: v for k, v in request.parameters.items() if k in _PASSED_ON}
        waiting = dict(enumerate(self.steps))
        running: dict[asyncio.Task[dict[str, Any]], int] = {}
        try:
            while waiting or running:
                for index in [i for i, step in waiting.items() if _ready(step, tensors)]:
                    step = waiting.pop(index)
                    task = asyncio.ensure_future(self._step(index, step, tensors, parameters))
                    running[task] = index
                if not running:
                    raise ModelError(self._stuck(waiting, tensors))
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    running.pop(task)
                    tensors.update(task.result())
        finally:
            for task in running:
                task.cancel()
        outputs = [Tensor(name, tensors[name]) for name in self.output_names if name in tensors]
        return InferenceResponse(outputs=outputs, model_name=self.name)

    async def _step(
        self,
        index: int,
        step: dict[str, Any],
        tensors: dict[str, Any],
        parameters: dict[str, Any],
    ) -> dict[str, Any]:
        model, request, version = _step_call(step, tensors, parameters)
        try:
            response = await model_calls.infer(model, request, version)
        except InferdError as error:
            raise _in_step(error, self.name, index, model) from None
        return self._produced(index, step, response)

    def _produced(
        self, index: int, step: dict[str, Any], response: InferenceResponse
    ) -> dict[str, Any]:
        """The ensemble tensors a step's response gives (its output_map)."""
        produced = {}
        for own, ours in step.get("output_map", {}).items():
            try:
                produced[ours] = response.output(own).data
            except KeyError:
                raise ModelError(
                    f"Ensemble {self.name!r} step {index} (model {step['model_name']!r}): the "
                    f"model answered no output {own!r}"
                ) from None
        return produced

    # A decoupled ensemble (model_transaction_policy { decoupled: true }): its steps
    # may be decoupled models; each response of a step flows on through the steps
    # after it, and each that reaches the end is one response of the ensemble.

    @property
    def streams(self) -> bool:
        config = self.settings.extra["triton_config"]
        return bool(config.get("model_transaction_policy", {}).get("decoupled"))

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        tensors = {tensor.name: tensor.data for tensor in request.inputs}
        parameters = {k: v for k, v in request.parameters.items() if k in _PASSED_ON}
        async for reached in self._flow(tensors, frozenset(), parameters):
            outputs = [Tensor(name, reached[name]) for name in self.output_names if name in reached]
            yield InferenceResponse(outputs=outputs, model_name=self.name)

    async def _flow(
        self, tensors: dict[str, Any], done: frozenset[int], parameters: dict[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        """Every set of tensors the steps not ``done`` yet lead to, one step at a time."""
        ready = [i for i, step in enumerate(self.steps) if i not in done and _ready(step, tensors)]
        if not ready:
            waiting = {i: step for i, step in enumerate(self.steps) if i not in done}
            if waiting:
                raise ModelError(self._stuck(waiting, tensors))
            yield tensors
            return
        index = ready[0]
        step = self.steps[index]
        model, call, version = _step_call(step, tensors, parameters)
        async with contextlib.aclosing(model_calls.infer_stream(model, call, version)) as answers:
            while True:
                try:
                    response = await anext(answers)
                except StopAsyncIteration:
                    return
                except InferdError as error:  # this step's (later steps' say their own)
                    raise _in_step(error, self.name, index, model) from None
                produced = {**tensors, **self._produced(index, step, response)}
                async for reached in self._flow(produced, done | {index}, parameters):
                    yield reached

    def _stuck(self, waiting: dict[int, dict[str, Any]], tensors: dict[str, Any]) -> str:
        index, step = next(iter(waiting.items()))
        missing = sorted(set(step.get("input_map", {}).values()) - set(tensors))
        return (
            f"Ensemble {self.name!r} step {index} (model {step['model_name']!r}) waits for "
            f"tensors {missing} that no step produced (is an ensemble input missing?)"
        )


def _step_call(
    step: dict[str, Any], tensors: dict[str, Any], parameters: dict[str, Any]
) -> tuple[str, InferenceRequest, str | None]:
    """The model a step calls, its request (its input_map's tensors, asking for its
    output_map's outputs) and the version (None: the latest)."""
    request = InferenceRequest(
        inputs=[Tensor(own, tensors[ours]) for own, ours in step.get("input_map", {}).items()],
        parameters=dict(parameters),
        outputs=[RequestedOutput(own) for own in step.get("output_map", {})],
    )
    version = step.get("model_version", -1)
    return step["model_name"], request, None if version in (-1, None) else str(version)


def _ready(step: dict[str, Any], tensors: dict[str, Any]) -> bool:
    return all(source in tensors for source in step.get("input_map", {}).values())


def _in_step(error: InferdError, ensemble: str, index: int, model: str) -> InferdError:
    """The step's error, its message saying which step failed (same kind, same code)."""
    message = f"Ensemble {ensemble!r} step {index} (model {model!r}): {error.message}"
    error.message = message
    error.args = (message,)
    return error


def _check_graph(
    name: str, steps: list[dict[str, Any]], inputs: set[str], outputs: list[str]
) -> None:
    """ConfigurationError, naming the step, for a tensor nothing produces."""
    produced: dict[str, int] = {}
    for index, step in enumerate(steps):
        for tensor in step.get("output_map", {}).values():
            if tensor in produced or tensor in inputs:
                raise ConfigurationError(
                    f"Ensemble {name!r} step {index}: tensor {tensor!r} is already produced "
                    "elsewhere; each ensemble tensor has one producer"
                )
            produced[tensor] = index
    for index, step in enumerate(steps):
        for tensor in step.get("input_map", {}).values():
            if tensor not in inputs and tensor not in produced:
                raise ConfigurationError(
                    f"Ensemble {name!r} step {index} (model {step['model_name']!r}) reads "
                    f"tensor {tensor!r}, which is neither an ensemble input nor a step's output"
                )
    for output in outputs:
        if output not in produced:
            raise ConfigurationError(
                f"Ensemble {name!r}: output {output!r} is produced by no step's output_map"
            )
