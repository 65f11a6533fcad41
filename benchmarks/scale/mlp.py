"""The scale benchmark's ``mlp``: issue 27's GPU MLP, stood in for on CPUs only.

The issue's model is a torch fp16 MLP (4 x Linear 2048) on an H100 behind adaptive
batching (32 rows, 2 ms). A request is one row of 2048 numbers, so over REST its
JSON body (about 20 KB) makes the protocol work heavy, while the device costs
mostly per call, whatever the rows. This stand-in keeps both halves and needs
neither torch nor a GPU: the same row size and batching, and a runtime written
into the repository (as the device model of the batching study was) whose predict
holds the device, an exclusive flock on one lock file that a layout's servers
share, for a fixed time per call plus a little per row, then answers from every
input of the row: the largest of each 128 consecutive inputs, 16 numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.common.models import write_model_folder

FEATURES = 2048  # the Linear 2048: one row of the request
OUTPUTS = 16  # each the max of FEATURES / OUTPUTS consecutive inputs
DIGITS = 6  # decimals of each number of the row in the JSON body
BATCHING = {"max_batch_size": 32, "max_batch_time": 0.002}  # the settings
MODULE_FILE = "mlp.py"
IMPLEMENTATION = "mlp.Mlp"

MLP_MODULE = '''\
"""Issue 27's GPU MLP on CPUs: {call_ms} ms per call plus {row_ms} ms per row on one
device (an exclusive flock on LOCK, whatever process or thread holds it), then y:
per row, the largest of each block of consecutive inputs ({outputs} numbers)."""

import fcntl
import time
from pathlib import Path

from inferd import InferenceResponse, Model, Tensor

CALL_S = {call_ms} / 1000
ROW_S = {row_ms} / 1000
OUTPUTS = {outputs}
LOCK = Path({lock})


class Mlp(Model):
    def predict(self, request):
        x = request.inputs[0].data
        rows = len(x)
        # Opened per call: flock excludes other open files, so calls in other threads
        # (threads_per_worker) wait for the device as calls in other processes do.
        with LOCK.open("a") as device:
            fcntl.flock(device, fcntl.LOCK_EX)
            time.sleep(CALL_S + ROW_S * rows)
            # A max, not a sum: exact in any order, so a row gets the same answer in
            # every batch, and the load generator checks each answer byte for byte.
            y = x.reshape(rows, OUTPUTS, -1).max(axis=2)
        return InferenceResponse(outputs=[Tensor("y", y)])
'''


def mlp_row() -> tuple[float, ...]:
    """The benchmark's one row: 2048 fixed numbers of ``DIGITS`` decimals, as a client
    of the issue's model would send (normal values, most of them 8-9 characters)."""
    values = np.random.default_rng(27).standard_normal(FEATURES)
    return tuple(round(float(value), DIGITS) for value in values)


def mlp_answer(row: tuple[float, ...]) -> tuple[float, ...]:
    """What the runtime answers for ``row``, computed here as the server receives it
    (FP32), to check the server's answer against."""
    x = np.asarray([row], dtype=np.float32)
    return tuple(float(value) for value in x.reshape(OUTPUTS, -1).max(axis=1))


def mlp_module(call_ms: float, row_ms: float, device_lock: Path) -> str:
    lock = json.dumps(str(device_lock.resolve()))
    return MLP_MODULE.format(call_ms=call_ms, row_ms=row_ms, outputs=OUTPUTS, lock=lock)


def write_mlp_model(
    repo: Path, name: str, call_ms: float, row_ms: float, device_lock: Path
) -> Path:
    """``repo/name``: the runtime and its model-settings.json, batching as the issue's.
    ``device_lock`` is the device: the servers that name one file take turns on it."""
    files = {MODULE_FILE: mlp_module(call_ms, row_ms, device_lock)}
    return write_model_folder(repo, name, IMPLEMENTATION, files=files, **BATCHING)
