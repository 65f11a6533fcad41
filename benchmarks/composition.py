"""A closed-loop tritonclient load for the composition scenario: one pipeline request,
four ways (which model the client calls, and how many times).

- ``direct``: ``add_sub`` once.
- ``bls``: ``bls`` (a Python-backend model) calling ``add_sub`` with ``exec()``.
- ``ensemble``: ``add_sub_twice``, an ensemble of two ``add_sub`` steps (the first's
  sum is both inputs of the second: it answers 2 x (INPUT0 + INPUT1)).
- ``client-two``: the client calls ``add_sub`` twice itself, the ensemble's work.

Each of ``connections`` threads keeps one request in flight on its own
tritonclient.http client; a request's latency is the whole pipeline's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .loadgen import LoadResult, Target
from .tensorload import Client, run_clients

DIRECT, BLS, ENSEMBLE, CLIENT_TWO = "direct", "bls", "ensemble", "client-two"
WAYS = (DIRECT, BLS, ENSEMBLE, CLIENT_TWO)
A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([4, 3, 2, 1], dtype=np.float32)


@dataclass(frozen=True)
class CompositionTarget(Target):
    way: str = DIRECT
    http_address: str = ""


class Pipeline:
    """One client doing one pipeline request the way its target says."""

    def __init__(self, target: CompositionTarget) -> None:
        import tritonclient.http as lib

        self.lib: Any = lib
        self.way = target.way
        self.client: Any = lib.InferenceServerClient(target.http_address, network_timeout=60)

    def _tensor(self, name: str, array: np.ndarray, datatype: str) -> Any:
        made = self.lib.InferInput(name, list(array.shape), datatype)
        made.set_data_from_numpy(array)
        return made

    def _add_sub(self, model: str, first: np.ndarray, second: np.ndarray) -> Any:
        inputs = [self._tensor("INPUT0", first, "FP32"), self._tensor("INPUT1", second, "FP32")]
        if model == "bls":
            name = np.array([b"add_sub"], dtype=np.object_)
            inputs.insert(0, self._tensor("MODEL_NAME", name, "BYTES"))
        return self.client.infer(model, inputs)

    def run(self) -> np.ndarray:
        """OUTPUT0 of the pipeline: A + B (direct, bls) or 2 x (A + B) (two add_subs)."""
        if self.way == DIRECT:
            return self._add_sub("add_sub", A, B).as_numpy("OUTPUT0")
        if self.way == BLS:
            return self._add_sub("bls", A, B).as_numpy("OUTPUT0")
        if self.way == ENSEMBLE:
            return self._add_sub("add_sub_twice", A, B).as_numpy("OUTPUT0")
        sums = self._add_sub("add_sub", A, B).as_numpy("OUTPUT0")
        return self._add_sub("add_sub", sums, sums).as_numpy("OUTPUT0")

    def close(self) -> None:
        self.client.close()


def check_once(target: CompositionTarget) -> None:
    """One pipeline request; ValueError unless its answer is right."""
    pipeline = Pipeline(target)
    try:
        got = pipeline.run()
    finally:
        pipeline.close()
    expected = A + B if target.way in (DIRECT, BLS) else 2 * (A + B)
    if not np.array_equal(got, expected):
        raise ValueError(f"{target.way}: answered {got}, expected {expected}")


@dataclass(frozen=True)
class CompositionLoad:
    """``connections`` clients doing pipeline requests for a duration."""

    connections: int = 1
    name: str = "tritonclient"

    def run(self, target: Target, seconds: float, rate_hint: float | None) -> LoadResult:
        assert isinstance(target, CompositionTarget)

        def client() -> Client:
            pipeline = Pipeline(target)
            return pipeline.run, pipeline.close

        return run_clients(client, self.connections, seconds, target.way)
