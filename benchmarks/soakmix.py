"""The soak's request mix: what each kind of request sends and what it must get back.

Each :class:`Kind` is encoded once (a REST JSON body and a gRPC message) and
checked on every answer, so a soak that ran is also a soak that was answered
right. Pure: tested without a server.

Kinds: iris (1 and 3 rows), echo of FP32 tensors of three sizes and of strings,
a model error (the echo asked to fail), an unknown model, a client that leaves
while its request runs, and streams (SSE ``/infer_stream``, gRPC
``ModelStreamInfer``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from benchmarks.common.models import train_iris
from inferd.protocol import pb

from .repository import predicted_class
from .soakmodels import ECHO, ECHO_FAILURE, IRIS

ANSWER = "answer"  # outputs as expected
ERROR = "error"  # an error status with the expected message
LEAVE = "leave"  # the client leaves while the request runs: nothing to check
STREAM = "stream"  # several answers, each as expected

STREAM_PARTS = 3  # responses per streamed request
GRPC_STREAM_REQUESTS = 2  # requests per ModelStreamInfer call
LEAVE_SLEEP_MS = 50  # how long a request whose client leaves runs


@dataclass(frozen=True)
class Kind:
    """One kind of request, encoded for both protocols, with what its answer must be."""

    name: str
    weight: float
    expect: str
    model: str
    rest_body: bytes
    grpc_request: Any  # pb.ModelInferRequest
    # ANSWER/STREAM: each output's REST data (flat) and gRPC raw bytes, in order.
    rest_outputs: tuple[list[Any], ...] = ()
    grpc_outputs: tuple[bytes, ...] = ()
    # ERROR: the HTTP status, the gRPC code name, and words the message must hold.
    status: int = 200
    grpc_code: str = "OK"
    message: str = ""

    def check_rest(self, status: int, outputs: Sequence[Any] | None, error: str) -> str:
        """What is wrong with one REST answer ("" if nothing)."""
        return _check(self, status, "", outputs, error, rest=True)

    def check_grpc(self, code: str, outputs: Sequence[Any] | None, error: str) -> str:
        """What is wrong with one gRPC answer ("" if nothing)."""
        return _check(self, 200, code, outputs, error, rest=False)


def _check(
    kind: Kind, status: int, code: str, outputs: Sequence[Any] | None, error: str, rest: bool
) -> str:
    if kind.expect == ERROR:
        got = status if rest else code
        wanted = kind.status if rest else kind.grpc_code
        if got != wanted or kind.message not in error:
            return f"{kind.name}: wanted {wanted} with {kind.message!r}, got {got}: {error[:200]}"
        return ""
    if error or (rest and status != 200) or (not rest and code not in ("", "OK")):
        return f"{kind.name}: failed with {status if rest else code}: {error[:200]}"
    expected = kind.rest_outputs if rest else kind.grpc_outputs
    if outputs is None or list(outputs) != list(expected):
        return f"{kind.name}: wrong outputs {str(outputs)[:200]}"
    return ""


@dataclass
class Mix:
    """Picks the kind of each request, reproducibly (a seeded generator)."""

    kinds: Sequence[Kind]
    seed: int = 0
    _random: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def pick(self, count: int) -> list[Kind]:
        weights = [kind.weight for kind in self.kinds]
        return self._random.choices(list(self.kinds), weights, k=count)


def build_kinds() -> list[Kind]:
    """The mix, weighted roughly as traffic: mostly small answers, a few large ones,
    errors, clients that leave, and streams."""
    iris = train_iris()
    rows = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]], np.float32)
    classes = [predicted_class(iris, row) for row in rows]
    echo_params: dict[str, Any] = {}
    return [
        _iris_kind("iris-1-row", 30, rows[:1], classes[:1]),
        _iris_kind("iris-3-rows", 10, rows, classes),
        _echo_kind("echo-4-floats", 20, _floats(4), echo_params),
        _echo_kind("echo-1k-floats", 10, _floats(1024), echo_params),
        _echo_kind("echo-16k-floats", 2, _floats(16384), echo_params),
        _echo_kind("echo-strings", 5, np.array([b"hello", b"soak"], dtype=object), echo_params),
        _error_kind("echo-fails", 5, ECHO, {"fail": True}, 500, "INTERNAL", ECHO_FAILURE),
        _error_kind("unknown-model", 3, "nope", {}, 404, "NOT_FOUND", "'nope' is not found"),
        _leave_kind("client-leaves", 5),
        _stream_kind("stream", 10),
    ]


def _floats(count: int) -> np.ndarray:
    # Halves are exact in FP32, JSON and back: an echo can be compared exactly.
    return (np.arange(count, dtype=np.float32) % 1000 * 0.5).reshape(1, count)


def _rest_body(inputs: list[dict[str, Any]], parameters: dict[str, Any]) -> bytes:
    return orjson.dumps({"inputs": inputs, "parameters": parameters})


def _rest_input(name: str, values: np.ndarray) -> dict[str, Any]:
    datatype = "BYTES" if values.dtype == object else "FP32"
    data = [v.decode() for v in values.ravel()] if datatype == "BYTES" else values.ravel().tolist()
    return {"name": name, "shape": list(values.shape), "datatype": datatype, "data": data}


def _grpc_request(model: str, name: str, values: np.ndarray, params: dict[str, Any]) -> Any:
    datatype = "BYTES" if values.dtype == object else "FP32"
    tensor = pb.ModelInferRequest.InferInputTensor(
        name=name, datatype=datatype, shape=list(values.shape)
    )
    return pb.ModelInferRequest(
        model_name=model,
        inputs=[tensor],
        raw_input_contents=[_raw(values)],
        parameters={key: _parameter(value) for key, value in params.items()},
    )


def _raw(values: np.ndarray) -> bytes:
    if values.dtype != object:
        return values.tobytes()
    return b"".join(len(v).to_bytes(4, "little") + v for v in values.ravel())


def _parameter(value: Any) -> Any:
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    return pb.InferParameter(int64_param=int(value))


def _echo_outputs(values: np.ndarray) -> dict[str, Any]:
    flat = values.ravel()
    rest = [v.decode() for v in flat] if values.dtype == object else flat.tolist()
    return {"rest_outputs": (rest,), "grpc_outputs": (_raw(values),)}


def _iris_kind(name: str, weight: float, rows: np.ndarray, classes: list[int]) -> Kind:
    return Kind(
        name,
        weight,
        ANSWER,
        IRIS,
        _rest_body([_rest_input("input-0", rows)], {}),
        _grpc_request(IRIS, "input-0", rows, {}),
        rest_outputs=(classes,),
        grpc_outputs=(np.array(classes, dtype=np.int64).tobytes(),),
    )


def _echo_kind(name: str, weight: float, values: np.ndarray, params: dict[str, Any]) -> Kind:
    rest_body = _rest_body([_rest_input("x", values)], params)
    grpc_request = _grpc_request(ECHO, "x", values, params)
    return Kind(name, weight, ANSWER, ECHO, rest_body, grpc_request, **_echo_outputs(values))


def _error_kind(
    name: str, weight: float, model: str, params: dict[str, Any], status: int, code: str, text: str
) -> Kind:
    values = _floats(4)
    rest_body = _rest_body([_rest_input("x", values)], params)
    grpc_request = _grpc_request(model, "x", values, params)
    return Kind(
        name, weight, ERROR, model, rest_body, grpc_request, status=status, grpc_code=code,
        message=text,
    )  # fmt: skip


def _leave_kind(name: str, weight: float) -> Kind:
    params = {"sleep_ms": LEAVE_SLEEP_MS}
    values = _floats(4)
    rest_body = _rest_body([_rest_input("x", values)], params)
    return Kind(name, weight, LEAVE, ECHO, rest_body, _grpc_request(ECHO, "x", values, params))


def _stream_kind(name: str, weight: float) -> Kind:
    values = _floats(8)
    params = {"parts": STREAM_PARTS}
    outputs = _echo_outputs(values)
    rest_body = _rest_body([_rest_input("x", values)], params)
    grpc_request = _grpc_request(ECHO, "x", values, params)
    return Kind(name, weight, STREAM, ECHO, rest_body, grpc_request, **outputs)
