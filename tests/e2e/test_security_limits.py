"""The limits on what one client can make the server hold, with the status each answers.

One server with small limits: ``max_header_size`` (REST 431, gRPC RESOURCE_EXHAUSTED),
``max_request_size`` (413, RESOURCE_EXHAUSTED), ``max_connections`` (REST 503 with
Retry-After, gRPC connection closed: UNAVAILABLE) and ``grpc_max_concurrent_streams``
(advertised in the server's HTTP/2 SETTINGS).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator

import grpc
import httpx
import pytest

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, default_protocol_processes, start_server

MAX_HEADER = 4096
MAX_REQUEST = 64 * 1024
MAX_CONNECTIONS = 3
MAX_STREAMS = 7
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_SETTINGS, H2_MAX_CONCURRENT_STREAMS = 0x4, 0x3


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("limited")
    add_custom_model(repository, "echo", "Echo")
    settings = {
        "max_header_size": MAX_HEADER,
        "max_request_size": MAX_REQUEST,
        "max_connections": MAX_CONNECTIONS,
        "grpc_max_concurrent_streams": MAX_STREAMS,
    }
    with start_server(repository, settings) as process:
        yield process


def live(channel: grpc.Channel, **kwargs: object) -> bool:
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    return bool(stub.ServerLive(pb.ServerLiveRequest(), timeout=10, **kwargs).live)


def own_channel(address: str) -> grpc.Channel:
    """A channel with a connection of its own (grpcio shares them between channels)."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def test_headers_over_the_limit(limited: ServerProcess) -> None:
    with httpx.Client(base_url=limited.url, timeout=10) as http:
        assert http.get("/v2/health/live", headers={"x-pad": "a" * 3000}).status_code == 200
        refused = http.get("/v2/health/live", headers={"x-pad": "a" * MAX_HEADER})
    assert refused.status_code == 431
    assert "max_header_size (4096 bytes)" in refused.json()["error"]
    # A header section that never ends is refused once it passes the limit.
    with socket.create_connection(("127.0.0.1", limited.http_port), timeout=10) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nx-pad: " + b"a" * (MAX_HEADER + 1))
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer
    with grpc.insecure_channel(limited.grpc_address) as channel:
        assert live(channel, metadata=(("x-pad", "a" * 3000),))
        with pytest.raises(grpc.RpcError) as refusal:
            live(channel, metadata=(("x-pad", "a" * MAX_HEADER),))
    assert refusal.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_request_over_the_size_limit(limited: ServerProcess) -> None:
    data = [0] * (MAX_REQUEST // 2)  # at least two bytes a number in JSON
    body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [len(data)], "data": data}]}
    with httpx.Client(base_url=limited.url, timeout=10) as http:
        assert http.post("/v2/models/echo/infer", json=body).status_code == 413
    request = pb.ModelInferRequest(model_name="echo", raw_input_contents=[bytes(MAX_REQUEST)])
    request.inputs.add(name="x", datatype="INT8", shape=[MAX_REQUEST])
    with grpc.insecure_channel(limited.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refusal:
            stub.ModelInfer(request, timeout=10)
    assert refusal.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_grpc_advertises_its_streams_per_connection(limited: ServerProcess) -> None:
    """The server's HTTP/2 SETTINGS frame carries SETTINGS_MAX_CONCURRENT_STREAMS."""
    with socket.create_connection(("127.0.0.1", limited.grpc_port), timeout=10) as sock:
        sock.sendall(H2_PREFACE + _frame(H2_SETTINGS, b""))
        kind, payload = _read_frame(sock)
    assert kind == H2_SETTINGS
    settings = dict(struct.iter_unpack(">HI", payload))
    assert settings[H2_MAX_CONCURRENT_STREAMS] == MAX_STREAMS


def _frame(kind: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, 0]) + (0).to_bytes(4, "big") + payload


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    head = _read_exactly(sock, 9)
    return head[3], _read_exactly(sock, int.from_bytes(head[:3], "big"))


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data


# max_connections bounds each process's connections (README, "Using every core"): with
# N protocol processes, which the kernel hands connections to, the server takes up to
# N x max_connections, so one more connection than the bound is not refused.
PER_PROCESS = pytest.mark.skipif(
    default_protocol_processes() > 1,
    reason="max_connections bounds each protocol process's connections, not the server's",
)


@PER_PROCESS
def test_rest_connections_over_the_limit_get_503(limited: ServerProcess) -> None:
    with contextlib.ExitStack() as stack:
        held = [
            stack.enter_context(httpx.Client(base_url=limited.url, timeout=10))
            for _ in range(MAX_CONNECTIONS)
        ]
        for client in held:  # each keeps its connection open after its answer
            # (until the server has seen earlier tests' connections close, it may refuse)
            wait_for(lambda c=client: c.get("/v2/health/live").status_code == 200, "a slot")
        with httpx.Client(base_url=limited.url, timeout=10) as extra:
            refused = extra.get("/v2/health/live")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert "max_connections (3)" in refused.json()["error"]
        assert held[0].get("/v2/health/live").status_code == 200  # those held still work
    with httpx.Client(base_url=limited.url, timeout=10) as later:  # and once they are gone
        assert later.get("/v2/health/live").status_code == 200


@PER_PROCESS
def test_grpc_connections_over_the_limit_are_closed(limited: ServerProcess) -> None:
    with contextlib.ExitStack() as stack:
        held = [
            stack.enter_context(own_channel(limited.grpc_address)) for _ in range(MAX_CONNECTIONS)
        ]
        # wait_for_ready: retried while the server still counts earlier tests' connections
        assert all(live(channel, wait_for_ready=True) for channel in held)
        with own_channel(limited.grpc_address) as extra, pytest.raises(grpc.RpcError) as refusal:
            live(extra)
        assert refusal.value.code() is grpc.StatusCode.UNAVAILABLE
        assert live(held[0])


def test_answers_name_no_library(limited: ServerProcess) -> None:
    with httpx.Client(base_url=limited.url, timeout=10) as http:
        answers = [
            http.get("/v2/health/live"),
            http.get("/v2/no/such/route"),
            http.post("/v2/models/echo/infer", content=b"{not json"),
        ]
    for answer in answers:
        assert "server" not in answer.headers
        assert "Traceback" not in answer.text and "uvicorn" not in answer.text
