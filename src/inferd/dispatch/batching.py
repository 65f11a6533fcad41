"""Exact merging of requests into one batch and splitting of its answer.

A batch is several requests stacked along the first axis (the rows), input by
input. Only requests the model would treat alike are stacked: same input names in
the same order, same datatypes, same trailing shapes, same tensor and request
parameters, same requested outputs. Anything else gets a different
:func:`batch_key` and goes in another batch; merging never fails a request.

The answer is cut back by each request's row count (:func:`share_batch` hands
each waiting request its share when the batch's run ends). Every slice is a view of the
batch's output (no copy), and each response keeps its own id and parameters. A
model that answers with another number of rows than it was given fails the
whole batch with a :class:`ModelError` to each request, never a wrong answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from inferd.errors import ModelError
from inferd.types import InferenceRequest, InferenceResponse, Tensor

# Parameters that steer the queue or the wire encoding, not the model: requests that
# differ only in these may share a batch.
QUEUE_PARAMETERS = frozenset({"priority", "timeout", "binary_data_output"})
OUTPUT_TRANSPORT_PARAMETERS = frozenset({"binary_data"})


def batch_rows(request: InferenceRequest) -> int | None:
    """The request's row count (first dimension shared by all inputs), or None when it
    cannot be stacked with others (no inputs, a scalar input, or inputs whose first
    dimensions differ)."""
    rows: int | None = None
    for tensor in request.inputs:
        shape = tensor.data.shape
        if not shape:
            return None
        if rows is None:
            rows = shape[0]
        elif shape[0] != rows:
            return None
    return rows


def batch_key(request: InferenceRequest) -> Hashable:
    """What two requests must share to be stacked into one batch."""
    inputs = tuple(
        (tensor.name, tensor.data.dtype.str, tensor.data.shape[1:], _frozen(tensor.parameters))
        for tensor in request.inputs
    )
    parameters = _without(request.parameters, QUEUE_PARAMETERS)
    outputs = tuple(
        (output.name, _frozen(_without(output.parameters, OUTPUT_TRANSPORT_PARAMETERS)))
        for output in request.outputs
    )
    return inputs, _frozen(parameters), outputs


def merge(requests: Sequence[InferenceRequest]) -> InferenceRequest:
    """One request with every request's rows, in order. The requests must share a
    :func:`batch_key`; a single request is returned as it is."""
    first = requests[0]
    if len(requests) == 1:
        return first
    inputs = [
        Tensor(
            tensor.name,
            np.concatenate([request.inputs[index].data for request in requests]),
            tensor.parameters,
        )
        for index, tensor in enumerate(first.inputs)
    ]
    rows = tuple(request.inputs[0].data.shape[0] for request in requests) if inputs else ()
    deadlines = [request.deadline for request in requests if request.deadline is not None]
    return InferenceRequest(
        inputs=inputs,
        id=first.id,
        parameters=first.parameters,
        outputs=first.outputs,
        batch_rows=rows,
        deadline=min(deadlines) if deadlines else None,  # its calls end with the first's
    )


def split(
    response: InferenceResponse, requests: Sequence[InferenceRequest], rows: Sequence[int]
) -> list[InferenceResponse]:
    """Cut a batch's response into one response per request (``rows`` each)."""
    if len(requests) == 1:
        return [response]
    total = sum(rows)
    for tensor in response.outputs:
        shape = tensor.data.shape
        if not shape or shape[0] != total:
            found = shape[0] if shape else "a scalar"
            raise ModelError(
                f"The model answered a batch of {total} rows with {found} rows in output "
                f"{tensor.name!r}; a model with max_batch_size > 1 must return one row per "
                "input row (set max_batch_size to 0 or 1 to turn batching off)"
            )
    responses = []
    start = 0
    for request, count in zip(requests, rows, strict=True):
        stop = start + count
        outputs = [
            Tensor(tensor.name, tensor.data[start:stop], dict(tensor.parameters))
            for tensor in response.outputs
        ]
        responses.append(
            InferenceResponse(
                outputs=outputs,
                model_name=response.model_name,
                model_version=response.model_version,
                id=request.id,
                parameters=dict(response.parameters),
            )
        )
        start = stop
    return responses


def share_batch(
    running: asyncio.Future[InferenceResponse],
    requests: Sequence[InferenceRequest],
    rows: Sequence[int],
    on_done: Callable[[], None],
) -> list[asyncio.Future[InferenceResponse]]:
    """One future per request for its share of the running batch's answer.

    When the batch ends, ``on_done`` runs first (the scheduler starts the next
    batch before these clients are answered), then each share gets its rows, or
    the batch's error (a cancelled batch fails each share as cancelled).
    """
    loop = running.get_loop()
    shares: list[asyncio.Future[InferenceResponse]] = [loop.create_future() for _ in requests]

    def batch_done(done: asyncio.Future[InferenceResponse]) -> None:
        on_done()
        try:
            responses = split(done.result(), requests, rows)
        except BaseException as error:  # the model's error (or a cancellation) for each
            for share in shares:
                if not share.done():
                    share.set_exception(_copy_error(error))
            return
        for share, response in zip(shares, responses, strict=True):
            if not share.done():
                share.set_result(response)

    running.add_done_callback(batch_done)
    return shares


def _copy_error(error: BaseException) -> BaseException:
    if isinstance(error, asyncio.CancelledError):
        return asyncio.CancelledError()
    return error


def _without(parameters: dict[str, Any], ignored: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in parameters.items() if k not in ignored}


def _frozen(value: Any) -> Hashable:
    """A hashable stand-in for a parameter value (dicts and lists included)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, Hashable):
        return (type(value).__name__, value)
    return repr(value)
