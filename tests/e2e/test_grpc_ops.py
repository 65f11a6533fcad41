"""gRPC operations: health checking, reflection, graceful shutdown, a busy port."""

from __future__ import annotations

import queue
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model, write_model_folder
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, free_port

INFERENCE_SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CALL_TIMEOUT = 30.0

# An async model that notes each call in the file named by the request's "marker"
# parameter, sleeps for its "seconds" parameter, then echoes x.
SLOW_RUNTIME = """
import asyncio

from inferd import InferenceResponse, Model, Tensor


class Slow(Model):
    async def predict(self, request):
        with open(request.parameters["marker"], "a") as marker:
            marker.write("called\\n")
        await asyncio.sleep(request.parameters["seconds"])
        return InferenceResponse(outputs=[Tensor("x", request.input("x").data)])
"""


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_address) as channel:
        yield channel


def health_check(channel: grpc.Channel, service: str) -> Any:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=CALL_TIMEOUT).status


@pytest.mark.parametrize("service", ["", INFERENCE_SERVICE, "liveness"])
def test_health_serving_when_ready(channel: grpc.Channel, service: str) -> None:
    assert health_check(channel, service) == SERVING


def test_health_unknown_service(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        health_check(channel, "no.such.Service")
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert "Unknown service 'no.such.Service'" in raised.value.details()


def test_health_watch_sends_the_current_status(channel: grpc.Channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=CALL_TIMEOUT)
    try:
        assert next(watch).status == SERVING
    finally:
        watch.cancel()


def test_health_not_serving_until_ready(start: Any, tmp_path: Path) -> None:
    add_custom_model(tmp_path, "broken", "FailsToLoad")
    process = start(wait="/v2/health/live")
    with grpc.insecure_channel(process.grpc_address) as channel:
        assert health_check(channel, "") == NOT_SERVING
        assert health_check(channel, INFERENCE_SERVICE) == NOT_SERVING
        assert health_check(channel, "liveness") == SERVING


def test_reflection_describes_every_service(channel: grpc.Channel) -> None:
    database = ProtoReflectionDescriptorDatabase(channel)
    services = set(database.get_services())
    assert {INFERENCE_SERVICE, HEALTH_SERVICE} <= services
    pool = descriptor_pool.DescriptorPool(database)
    infer = pool.FindServiceByName(INFERENCE_SERVICE).methods_by_name["ModelInfer"]
    assert infer.input_type.full_name == "inference.ModelInferRequest"
    assert pool.FindMessageTypeByName("inference.InferParameter").fields_by_name["uint64_param"]
    assert pool.FindServiceByName(HEALTH_SERVICE).methods_by_name["Check"]


def add_slow_model(repository: Path, name: str) -> None:
    write_model_folder(repository, name, "slowruntime.Slow", files={"slowruntime.py": SLOW_RUNTIME})


def slow_request(model: str, marker: Path, seconds: float, value: float) -> Any:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1])
    return pb.ModelInferRequest(
        model_name=model,
        inputs=[tensor],
        raw_input_contents=[np.float32(value).tobytes()],
        parameters={
            "seconds": pb.InferParameter(double_param=seconds),
            "marker": pb.InferParameter(string_param=str(marker)),
        },
    )


def answer_value(response: Any) -> float:
    return float(np.frombuffer(response.raw_output_contents[0], dtype=np.float32)[0])


def test_sigterm_finishes_calls_in_flight(start: Any, tmp_path: Path) -> None:
    # Two models, so that the two calls run at once whatever the scheduler does.
    add_slow_model(tmp_path, "slow-a")
    add_slow_model(tmp_path, "slow-b")
    marker = tmp_path / "calls.txt"
    process = start()
    with grpc.insecure_channel(process.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        unary = stub.ModelInfer.future(slow_request("slow-a", marker, 3, 1.0), timeout=CALL_TIMEOUT)
        sent: queue.Queue[Any] = queue.Queue()
        stream = stub.ModelStreamInfer(iter(sent.get, None), timeout=CALL_TIMEOUT)
        sent.put(slow_request("slow-b", marker, 3, 2.0))
        streamed: list[Any] = []
        reader = threading.Thread(target=lambda: streamed.extend(drain(stream)))
        reader.start()
        wait_for(
            lambda: marker.exists() and len(marker.read_text().split()) == 2,
            "both slow calls to run",
            CALL_TIMEOUT,
        )
        process.process.send_signal(signal.SIGTERM)
        wait_for(lambda: refuses_new_calls(process), "new calls to be refused", CALL_TIMEOUT)
        assert not unary.done(), "new calls must be refused while old ones still run"
        assert answer_value(unary.result()) == 1.0
        reader.join(CALL_TIMEOUT)
        answers, error = streamed
        assert [answer_value(a.infer_response) for a in answers] == [2.0]
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in error.details()
        sent.put(None)
    assert process.process.wait(CALL_TIMEOUT) == 0


def refuses_new_calls(process: ServerProcess) -> bool:
    with grpc.insecure_channel(process.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            stub.ServerLive(pb.ServerLiveRequest(), timeout=1)
        except grpc.RpcError as error:
            return bool(error.code() == grpc.StatusCode.UNAVAILABLE)
    return False


def drain(stream: Any) -> tuple[list[Any], grpc.RpcError | None]:
    answers = []
    try:
        for answer in stream:
            answers.append(answer)
    except grpc.RpcError as error:
        return answers, error
    return answers, None


def test_grpc_port_in_use_stops_the_server(start: Any, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        process = start(settings={"grpc_port": port}, wait=None)
        assert process.process.wait(CALL_TIMEOUT) != 0
    assert f"Cannot listen for gRPC on 127.0.0.1:{port}" in process.log()
