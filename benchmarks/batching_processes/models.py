"""The two batched models of the benchmark, their folders and one checked request each.

``iris``: the light LogisticRegression (a fraction of a millisecond per call), where
the protocol work is most of a request's cost. ``device``: a runtime written into
the repository whose cost is mostly per call, as a GPU's is: a fixed few
milliseconds per call plus a little per row, slept while holding an exclusive lock
on a file (its folder's, or one the replicas share). The lock is the device: with
several replicas each holds its own copy of the model, but the calls still take
turns on one device (a GPU serves one batch at a time), so splitting requests into
smaller batches costs the fixed part more often; calls in two threads of one
process take turns too.
Both answer one FP32 row per request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.models import train_iris, write_model_folder

from ..repository import ROW, predicted_class, v2_request, write_sklearn_model

MAX_BATCH_SIZE = 32
MAX_BATCH_TIME_S = 0.002
BATCHING = {"max_batch_size": MAX_BATCH_SIZE, "max_batch_time": MAX_BATCH_TIME_S}

DEVICE_MODULE = '''\
"""A device-like model: {fixed_ms} ms per call plus {row_ms} ms per row, one call at a
time on the device (an exclusive lock on the file LOCK names, whatever process or
thread holds it); answers y = 2x."""

import fcntl
import time
from pathlib import Path

from inferd import InferenceResponse, Model, Tensor

FIXED_S = {fixed_ms} / 1000
PER_ROW_S = {row_ms} / 1000
LOCK = {lock}


class Device(Model):
    def predict(self, request):
        x = request.inputs[0].data
        # Opened per call: flock excludes other open files, so calls in other threads
        # (threads_per_worker) wait for the device as calls in other processes do.
        with LOCK.open("a") as device:
            fcntl.flock(device, fcntl.LOCK_EX)
            time.sleep(FIXED_S + PER_ROW_S * len(x))
        return InferenceResponse(outputs=[Tensor("y", x * 2)])
'''


@dataclass(frozen=True)
class BatchedModel:
    """One model of the repository and what its answer to ``ROW`` must hold."""

    name: str
    title: str
    expected: list[float]  # the answer's first output, flattened

    def rest_body(self) -> bytes:
        return json.dumps(v2_request([ROW]), separators=(",", ":")).encode()


def iris_model() -> BatchedModel:
    expected = float(predicted_class(train_iris()))
    return BatchedModel("iris", "iris LogisticRegression", [expected])


def device_model(fixed_ms: float, row_ms: float) -> BatchedModel:
    title = f"device-like, {fixed_ms:g} ms per call + {row_ms:g} ms per row, one device"
    return BatchedModel("device", title, [value * 2 for value in ROW])


def write_repository(
    repo: Path,
    fixed_ms: float,
    row_ms: float,
    extra: Mapping[str, Any] | None = None,
    device_lock: Path | None = None,
) -> None:
    """Both models, adaptive batching on (the sklearn runtime serves iris); ``extra``
    fields go into both model-settings.json files. The device is ``device_lock``
    (replicas' repositories name one file) or device.lock in the model's folder."""
    fields = {**BATCHING, **(extra or {})}
    write_sklearn_model(repo, "iris", train_iris(), fields=fields)
    lock = 'Path(__file__).with_name("device.lock")'
    if device_lock is not None:
        lock = f"Path({json.dumps(str(device_lock.resolve()))})"
    module = DEVICE_MODULE.format(fixed_ms=fixed_ms, row_ms=row_ms, lock=lock)
    write_model_folder(repo, "device", "device.Device", files={"device.py": module}, **fields)
