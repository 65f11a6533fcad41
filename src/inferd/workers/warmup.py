"""Running a model's warmup requests (``model_warmup``) where it was loaded.

Called by :meth:`LoadedModel.load` in each worker process (or the main process
with ``parallel_workers: 0``), so a model is warm in every worker that holds it
before the pool reports it loaded and the registry marks it READY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import numpy as np

from inferd.errors import InferdError, ModelError
from inferd.model import overrides
from inferd.settings.warmup import WarmupInputSettings, WarmupSettings
from inferd.tensors.datatypes import numpy_dtype
from inferd.tensors.encoding import array_from_json
from inferd.types import InferenceRequest, InferenceResponse, Tensor

if TYPE_CHECKING:
    from inferd.workers.loaded_model import LoadedModel

logger = logging.getLogger(__name__)


async def warm_up(loaded: LoadedModel) -> None:
    """Run every warmup request ``count`` times; ModelError naming the one that failed."""
    settings = loaded.model.settings
    batches = settings.max_batch_size > 1
    for number, warmup in enumerate(settings.model_warmup, start=1):
        label = repr(warmup.name) if warmup.name else f"#{number}"
        try:
            request = warmup_request(warmup, batches)
            for _ in range(warmup.count):
                await _run(loaded, request)
        except InferdError as error:
            raise ModelError(
                f"Warmup {label} of model {settings.name!r} failed: {error.message}"
            ) from error
        logger.debug("Model %r ran warmup %s %d time(s)", settings.name, label, warmup.count)


async def _run(loaded: LoadedModel, request: InferenceRequest) -> None:
    """One call, as a request would make it: predict, or a whole stream for a model
    that only streams. Plain code runs in a thread: a model loaded while the process
    serves (the repository API, in process) must not hold its event loop."""
    if overrides(loaded.model, "predict"):
        if loaded.is_async:
            await loaded.call_async(request)
        else:
            await asyncio.to_thread(loaded.call_sync, request)
        return
    responses = loaded.open_stream(request)
    if isinstance(responses, AsyncIterator):
        with contextlib.suppress(StopAsyncIteration):
            while True:
                await loaded.next_async(responses)
    else:
        await asyncio.to_thread(_exhaust, loaded, responses)


def _exhaust(loaded: LoadedModel, responses: Iterator[InferenceResponse]) -> None:
    with contextlib.suppress(StopIteration):
        while True:
            loaded.next_sync(responses)


def warmup_request(warmup: WarmupSettings, batches: bool) -> InferenceRequest:
    """The request a warmup describes; a batching model's inputs get ``batch_size`` rows."""
    inputs = []
    for name, spec in warmup.inputs.items():
        shape = [warmup.batch_size, *spec.dims] if batches else list(spec.dims)
        inputs.append(Tensor(name, _warmup_data(name, spec, shape)))
    return InferenceRequest(inputs, id=f"warmup-{warmup.name}" if warmup.name else "warmup")


def _warmup_data(name: str, spec: WarmupInputSettings, shape: list[int]) -> np.ndarray:
    if spec.input_data is not None:
        return array_from_json(name, spec.data_type, shape, spec.input_data)
    dtype = numpy_dtype(spec.data_type)
    if spec.data_type == "BYTES":
        if spec.zero_data:
            return np.full(shape, b"", dtype=object)
        digits = np.random.default_rng().integers(0, 10, size=shape)
        return np.vectorize(lambda digit: str(digit).encode(), otypes=[object])(digits)
    if spec.zero_data:
        return np.zeros(shape, dtype)
    rng = np.random.default_rng()
    if dtype.kind == "f" or spec.data_type == "BF16":
        return rng.random(shape).astype(dtype)
    # Small values, valid for every integer and boolean type.
    return rng.integers(0, 2 if dtype.kind == "b" else 10, size=shape).astype(dtype)
