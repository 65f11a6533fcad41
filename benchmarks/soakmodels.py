"""The soak's model repository, built in a temporary folder by the soak itself.

- ``iris``: a scikit-learn LogisticRegression trained here (adaptive batching on,
  so the merge and split path is soaked too).
- ``echo``: a Python model (``soakecho.py``, written next to its settings) that
  answers its inputs unchanged; the request parameter ``fail`` makes it raise,
  ``sleep_ms`` makes it wait first (an ``async def``: other requests go on), and
  ``predict_stream`` yields ``parts`` copies of the answer, for the streaming
  endpoints.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common.models import train_iris, write_model_folder

from .repository import write_sklearn_model

IRIS = "iris"
ECHO = "echo"
ECHO_FAILURE = "the soak asked this request to fail"

ECHO_MODULE = f'''\
"""The soak's echo model: see benchmarks/soakmodels.py."""

import asyncio

from inferd import InferenceRequest, InferenceResponse, Model, Tensor


class SoakEcho(Model):
    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        parameters = request.parameters
        if parameters.get("fail"):
            raise ValueError({ECHO_FAILURE!r})
        sleep_ms = parameters.get("sleep_ms")
        if sleep_ms:
            await asyncio.sleep(int(sleep_ms) / 1000)
        return InferenceResponse(outputs=[Tensor(t.name, t.data) for t in request.inputs])

    async def predict_stream(self, request: InferenceRequest):
        answer = await self.predict(request)
        for _ in range(int(request.parameters.get("parts", 1))):
            yield answer
'''


def write_soak_repository(repo: Path) -> Path:
    """``repo`` with ``iris`` and ``echo`` (settings.json is the caller's)."""
    implementation = "inferd.runtimes.sklearn.SKLearnModel"
    batching = {"max_batch_size": 8, "max_batch_time": 0.001}
    write_sklearn_model(repo, IRIS, train_iris(), implementation=implementation, fields=batching)
    # Several slots per worker: the echo's waits overlap instead of queueing.
    files = {"soakecho.py": ECHO_MODULE}
    write_model_folder(repo, ECHO, "soakecho.SoakEcho", files=files, threads_per_worker=4)
    return repo
