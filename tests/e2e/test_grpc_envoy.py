"""inferd's gRPC service in Envoy through pyvoy (server/envoy_app.py), with tritonclient.

pyvoy (Envoy, ~100 MB) is not in the test requirements: these tests run where a pyvoy
executable is found (``$INFERD_TEST_PYVOY``, beside this Python, or on PATH) in an
environment holding inferd's dependencies (``pip install -e '.[sklearn]' pyvoy``),
and are skipped elsewhere."""

from __future__ import annotations

import os
import queue
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sklearn.datasets import load_iris
from tritonclient.utils import InferenceServerException

from tests.support.models import add_sklearn_model
from tests.support.serverproc import (
    READY_PATH,
    ServerProcess,
    free_ports,
    server_environment,
    spawn,
    write_settings,
)

SRC = Path(__file__).resolve().parents[2] / "src"
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def pyvoy_executable() -> str | None:
    beside = Path(sys.executable).with_name("pyvoy")
    found = os.environ.get("INFERD_TEST_PYVOY") or (str(beside) if beside.exists() else None)
    return found or shutil.which("pyvoy")


PYVOY = pyvoy_executable()
pytestmark = pytest.mark.skipif(PYVOY is None, reason="pyvoy is not installed")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    assert PYVOY is not None
    repository = tmp_path_factory.mktemp("envoy-repository")
    add_sklearn_model(repository, "iris")
    ports = free_ports(3)
    names = ("http_port", "grpc_port", "metrics_port")
    write_settings(repository, {"parallel_workers": 0, **dict(zip(names, ports, strict=True))})
    command = [PYVOY, "--address", "127.0.0.1", "--port", str(ports[1]),
               "inferd.server.envoy_app:app"]  # fmt: skip
    env = server_environment({"PYTHONPATH": str(SRC), "INFERD_MODEL_REPOSITORY": str(repository)})
    process = spawn(
        command, repository=repository, log_path=repository / "envoy.log", ports=ports, env=env
    )
    try:
        process.wait_until(READY_PATH, port=ports[1])
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[triton.InferenceServerClient]:
    with triton.InferenceServerClient(server.grpc_address) as client:
        yield client


def rows() -> triton.InferInput:
    features = load_iris(return_X_y=True)[0][[0, 100]]
    tensor = triton.InferInput("predict", list(features.shape), "FP64")
    tensor.set_data_from_numpy(features)
    return tensor


def test_health_and_metadata(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("iris")
    assert client.get_server_metadata().name == "inferd"
    assert client.get_model_metadata("iris").name == "iris"


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_infer(client: triton.InferenceServerClient, compression: str | None) -> None:
    result = client.infer("iris", [rows()], compression_algorithm=compression)
    name = result.get_response().outputs[0].name
    assert result.as_numpy(name).ravel().tolist() == [0, 2]


def test_errors_are_status_codes(client: triton.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as missing:
        client.infer("nope", [rows()])
    assert missing.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as late:
        client.infer("iris", [rows()], client_timeout=1e-6)
    assert late.value.status() == "StatusCode.DEADLINE_EXCEEDED"


def test_stream_answers_every_request(client: triton.InferenceServerClient) -> None:
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for index in range(3):
            client.async_stream_infer("iris", [rows()], request_id=str(index))
        got = [answers.get(timeout=30) for _ in range(3)]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in got)
    ids = sorted(result.get_response().id for result, _ in got)  # type: ignore[attr-defined]
    assert ids == ["0", "1", "2"]


def test_grpc_health_and_limits(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        serving = health.Check(health_pb2.HealthCheckRequest(service=""))
        assert serving.status == health_pb2.HealthCheckResponse.SERVING
        call = channel.unary_unary(MODEL_INFER)
        with pytest.raises(grpc.RpcError) as malformed:
            call(b"\xff\xff\xff")
        assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as unknown:
            channel.unary_unary("/no.Such/Method")(b"")
        assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
    options = [("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(server.grpc_address, options=options) as channel:
        with pytest.raises(grpc.RpcError) as large:
            channel.unary_unary(MODEL_INFER)(b"\x0a\x04iris" + b"\x00" * (129 << 20))
        assert large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
