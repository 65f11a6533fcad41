"""The least a Python gRPC server on grpcio can spend per ModelInfer call or streamed answer.

A reference for ``python -m benchmarks grpc --reference``: grpcio's asyncio server on uvloop
(as inferd and MLServer use), one handler that parses the request, calls the
scikit-learn model's ``predict`` on the FP32 input and answers the class in
``raw_output_contents``: no settings, no checks, no metrics, no queue. What it
reaches is the ceiling for any server built on grpcio with this model, so
``floor / mlserver`` bounds the ratio inferd can show in that benchmark.

For ``python -m benchmarks streaming --reference`` (a repository holding the count
model) it serves ``ModelStreamInfer`` instead: for each request read from the call,
N ModelStreamInferResponses of one raw INT32 each (0..N-1), each yielded as made.

Reads the benchmark's repository (``settings.json`` for the ports, the model's
``model-settings.json`` for its file). ``GET /v2/health/ready`` on ``http_port``
answers 200 once serving, so the harness waits for it as for the real servers.

    python benchmarks/grpc_floor_server.py REPO
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import joblib
import numpy as np
import uvicorn
import uvloop

from inferd.protocol import pb

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
COUNT_MODULE = "count."  # the streaming scenario's model: count.<class>


def model_settings(repo: Path) -> tuple[Path, dict[str, Any]]:
    """The one model in ``repo``: its folder and its model-settings.json."""
    (settings_file,) = repo.glob("*/model-settings.json")
    return settings_file.parent, json.loads(settings_file.read_text())


def load_model(repo: Path) -> tuple[str, Any]:
    """The one model in ``repo``: its name and its unpickled estimator."""
    folder, settings = model_settings(repo)
    return settings["name"], joblib.load(folder / settings["parameters"]["uri"])


def answer(estimator: Any, body: bytes) -> bytes:
    """The serialized ModelInferResponse for a serialized ModelInferRequest."""
    request = pb.ModelInferRequest.FromString(body)
    tensor = request.inputs[0]
    if request.raw_input_contents:
        rows = np.frombuffer(request.raw_input_contents[0], dtype="<f4")
    else:
        rows = np.array(tensor.contents.fp32_contents, dtype=np.float32)
    classes = estimator.predict(rows.reshape(tuple(tensor.shape)))
    response = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
    response.outputs.add(name="predict", datatype="INT64", shape=[len(classes), 1])
    response.raw_output_contents.append(np.asarray(classes, dtype="<i8").tobytes())
    return response.SerializeToString()


def infer_handler(estimator: Any) -> grpc.RpcMethodHandler:
    # A coroutine: grpcio's asyncio server would run a plain function in a thread.
    async def infer(body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return answer(estimator, body)

    return grpc.unary_unary_rpc_method_handler(infer)


def count_answers(body: bytes) -> Iterator[bytes]:
    """The serialized ModelStreamInferResponses for a request asking for N: 0..N-1."""
    request = pb.ModelInferRequest.FromString(body)
    for index in range(request.inputs[0].contents.int_contents[0]):
        answer = pb.ModelStreamInferResponse()
        response = answer.infer_response
        response.model_name, response.id = request.model_name, request.id
        response.outputs.add(name="i", datatype="INT32", shape=[1])
        response.raw_output_contents.append(np.array([index], dtype="<i4").tobytes())
        yield answer.SerializeToString()


def stream_handler() -> grpc.RpcMethodHandler:
    async def stream(bodies: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for body in bodies:
            for answer in count_answers(body):
                yield answer

    return grpc.stream_stream_rpc_method_handler(stream)


class OneMethod(grpc.GenericRpcHandler):
    def __init__(self, method: str, handler: grpc.RpcMethodHandler) -> None:
        self._method = method
        self._handler = handler

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._handler if details.method == self._method else None


def one_method(repo: Path) -> OneMethod:
    """ModelStreamInfer for the count model, ModelInfer for an estimator."""
    _, settings = model_settings(repo)
    if settings.get("implementation", "").startswith(COUNT_MODULE):
        return OneMethod(MODEL_STREAM_INFER, stream_handler())
    _, estimator = load_model(repo)
    return OneMethod(MODEL_INFER, infer_handler(estimator))


async def ready(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI app answering 200 to every HTTP request: the harness's readiness poll."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def serve(repo: Path) -> None:
    settings = json.loads((repo / "settings.json").read_text())
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((one_method(repo),))
    server.add_insecure_port(f"127.0.0.1:{settings['grpc_port']}")
    await server.start()
    config = uvicorn.Config(ready, port=settings["http_port"], log_level="warning", lifespan="off")
    await uvicorn.Server(config).serve()  # returns on SIGTERM
    await server.stop(grace=1)


if __name__ == "__main__":
    uvloop.run(serve(Path(sys.argv[1])))
