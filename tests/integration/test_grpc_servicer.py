"""The gRPC server in process (grpc.aio in the test's event loop), on the same DataPlane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import numpy as np
import pytest
from sklearn.datasets import load_iris

from inferd.protocol import pb, pb_grpc
from inferd.server.app import InferenceServer
from tests.support.models import train_iris
from tests.support.polling import wait_for_async

from .conftest import StartServer
from .runtimes import Gated

pytestmark = pytest.mark.anyio

Stub = pb_grpc.GRPCInferenceServiceStub


def request(
    model: str, values: list[float], name: str = "x", **fields: str
) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=model, **fields)
    tensor = message.inputs.add(name=name, datatype="FP32", shape=[1, len(values)])
    tensor.contents.fp32_contents.extend(values)
    return message


def floats_of(answer: pb.ModelInferResponse, index: int = 0) -> list[float]:
    return np.frombuffer(answer.raw_output_contents[index], dtype=np.float32).tolist()


async def test_model_infer_runs_the_model(stub: Stub) -> None:
    rows = load_iris(return_X_y=True)[0][[0, 60, 120]]
    message = pb.ModelInferRequest(model_name="iris", id="r1")
    message.inputs.add(name="input-0", datatype="FP64", shape=list(rows.shape))
    message.raw_input_contents.append(rows.tobytes())
    answer = await stub.ModelInfer(message)
    assert (answer.model_name, answer.id) == ("iris", "r1")
    predicted = np.frombuffer(answer.raw_output_contents[0], dtype=np.int64)
    assert predicted.tolist() == train_iris().predict(rows).tolist()


async def test_typed_outputs_on_request_and_versions(stub: Stub) -> None:
    message = request("versioned", [1.5, 2.5], model_version="1")
    message.parameters["raw_output"].bool_param = False
    answer = await stub.ModelInfer(message)
    assert answer.model_version == "1"
    assert not answer.raw_output_contents
    assert list(answer.outputs[0].contents.fp32_contents) == [1.5, 2.5]


@pytest.mark.parametrize(
    ("message", "code", "fragment"),
    [
        (
            request("nope", [1.0]),
            grpc.StatusCode.NOT_FOUND,
            "Request for unknown model: 'nope' is not found",
        ),
        (request("", [1.0]), grpc.StatusCode.INVALID_ARGUMENT, "model_name is required"),
        (request("fails", [1.0]), grpc.StatusCode.INTERNAL, "ValueError: this model always"),
        (
            pb.ModelInferRequest(model_name="echo", raw_input_contents=[b"\0"]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "raw_input_contents has 1 entries for 0 inputs",
        ),
    ],
)
async def test_errors_become_status_codes(
    stub: Stub, message: pb.ModelInferRequest, code: grpc.StatusCode, fragment: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await stub.ModelInfer(message)
    assert failed.value.code() == code
    assert fragment in (failed.value.details() or "")
    assert "Traceback" not in (failed.value.details() or "")


async def test_an_answer_over_the_message_limit_is_resource_exhausted(
    start_inferd: StartServer,
) -> None:
    server = await start_inferd(grpc_max_message_length=4096)
    # 1000 small INT64s: about a byte each in the request, eight each in the raw answer.
    message = pb.ModelInferRequest(model_name="echo")
    tensor = message.inputs.add(name="x", datatype="INT64", shape=[1000])
    tensor.contents.int64_contents.extend([1] * 1000)
    grpc_server = server.grpc_server()
    await grpc_server.start()
    try:
        async with grpc.aio.insecure_channel(grpc_server.address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await Stub(channel).ModelInfer(message)
    finally:
        await grpc_server.stop(0)
    assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over grpc_max_message_length (4096)" in (failed.value.details() or "")


async def test_a_full_queue_is_unavailable_with_retry_pushback(
    stub: Stub, inferd: InferenceServer
) -> None:
    running = asyncio.ensure_future(stub.ModelInfer(request("gated", [1.0])))
    await wait_for_async(lambda: Gated.running == 1, "the first call to run")
    waiting = asyncio.ensure_future(stub.ModelInfer(request("gated", [2.0])))
    scheduler = inferd.registry.find("gated").scheduler
    assert scheduler is not None
    await wait_for_async(lambda: scheduler.waiting == 1, "the second call to queue")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ModelInfer(request("gated", [3.0]))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "is full" in (refused.value.details() or "")
    assert ("grpc-retry-pushback-ms", "1000") in tuple(refused.value.trailing_metadata() or ())
    Gated.gate.set()
    assert [floats_of(await call) for call in (running, waiting)] == [[2.0], [4.0]]


async def test_a_stream_answers_in_order_and_goes_on_after_a_failure(stub: Stub) -> None:
    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        yield request("echo", [1.0], id="a")
        yield request("fails", [2.0], id="b")
        yield request("nope", [3.0], id="c")
        yield request("versioned", [4.0], id="d", model_version="2")

    answers = [answer async for answer in stub.ModelStreamInfer(requests())]
    assert [a.infer_response.id for a in answers] == ["a", "b", "c", "d"]
    assert [a.error_message for a in answers] == [
        "",
        "Model 'fails' failed: ValueError: this model always fails",
        "Request for unknown model: 'nope' is not found",
        "",
    ]
    assert answers[1].infer_response.model_name == "fails"  # which request failed
    assert floats_of(answers[0].infer_response) == [1.0]
    assert answers[3].infer_response.model_version == "2"


async def test_a_stream_runs_its_requests_together(stub: Stub) -> None:
    """Requests of one stream run at once: the second queues while the first runs."""

    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        for value in (1.0, 2.0):
            yield request("gated", [value])
        await wait_for_async(lambda: Gated.running == 1, "the stream's first request to run")
        Gated.gate.set()

    answers = [answer async for answer in stub.ModelStreamInfer(requests())]
    assert [floats_of(a.infer_response) for a in answers] == [[2.0], [4.0]]
    assert Gated.ran == [1.0, 2.0]


async def test_calls_are_counted_by_method_and_code(stub: Stub, inferd: InferenceServer) -> None:
    await stub.ModelInfer(request("echo", [1.0]))
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.ModelInfer(request("nope", [1.0]))
    assert [a async for a in stub.ModelStreamInfer(iter([request("echo", [1.0])]))]
    assert inferd.grpc_stats is not None
    service = "inference.GRPCInferenceService"
    infer = inferd.grpc_stats.method(service, "ModelInfer")
    assert (infer.started, infer.handled) == (2, {"OK": 1, "NOT_FOUND": 1})
    stream = inferd.grpc_stats.method(service, "ModelStreamInfer")
    assert (stream.kind, stream.started, stream.handled) == ("bidi_stream", 1, {"OK": 1})


async def test_repository_and_health_calls(stub: Stub) -> None:
    assert (await stub.ServerReady(pb.ServerReadyRequest())).ready
    assert (await stub.ModelReady(pb.ModelReadyRequest(name="echo"))).ready
    await stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="echo"))
    index = await stub.RepositoryIndex(pb.RepositoryIndexRequest())
    states = {(model.name, model.version): model.state for model in index.models}
    assert states[("echo", "")] == "UNAVAILABLE"
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await stub.ModelInfer(request("echo", [1.0]))
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    await stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="echo"))
    assert floats_of(await stub.ModelInfer(request("echo", [5.0]))) == [5.0]
