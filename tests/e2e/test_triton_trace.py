"""Triton's trace extension with tritonclient (HTTP and gRPC, sync and aio), on a
server that exports OpenTelemetry traces to a real OTLP receiver, with one and with
three protocol processes.

The settings are read and changed as Triton's trace extension says (strings, the
level a list, null clears, a model's settings follow the server's where not set),
hold whichever process a connection lands on, and decide which inference requests
of a model are traced: ``trace_level`` OFF none, ``trace_rate`` N every N-th.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from benchmarks.otlp_receiver import OtlpReceiver
from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

REST_INFER = "POST /v2/models/{name}/infer"
DEFAULTS = {
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "opentelemetry",
}
BODY = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [1]}]}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    started = OtlpReceiver().start()
    yield started
    started.stop()


@pytest.fixture(scope="module", params=[1, 3], ids=["1-protocol-process", "3-protocol-processes"])
def traced(
    request: pytest.FixtureRequest, receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("trace")
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "other", "Echo")
    settings = {"tracing_server": receiver.endpoint, "protocol_processes": request.param}
    env = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
    with start_server(repository, settings, env=env) as process:
        yield process


@pytest.fixture
def http(traced: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{traced.http_port}")
    yield client
    # Back to the start for the next test: every field cleared, the server's and echo's.
    cleared = dict.fromkeys(("trace_level", "trace_rate", "trace_count", "log_frequency"))
    client.update_trace_settings(settings=cleared)
    client.update_trace_settings("echo", settings=cleared)
    client.close()


def everywhere(server: ServerProcess, model: str = "") -> list[dict[str, Any]]:
    """The settings as six new connections (any process) read them."""
    answers = []
    for _ in range(6):
        with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
            answers.append(client.get_trace_settings(model or None))
    return answers


def grpc_settings(response: Any) -> dict[str, Any]:
    """A TraceSettingResponse as REST answers it (a list only for the level)."""
    values = {key: list(value.value) for key, value in response.settings.items()}
    return {key: value if key == "trace_level" else value[0] for key, value in values.items()}


def test_settings_server_wide_and_per_model(
    traced: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    assert http.get_trace_settings() == DEFAULTS
    assert "trace" in http.get_server_metadata()["extensions"]
    changed = http.update_trace_settings(settings={"trace_rate": "4", "log_frequency": "10"})
    assert changed == DEFAULTS | {"trace_rate": "4", "log_frequency": "10"}
    # A model's first settings take the server's for the fields not given ...
    echo = http.update_trace_settings("echo", {"trace_level": ["OFF"]})
    assert echo == changed | {"trace_level": ["OFF"]}
    # ... and keep following them.
    http.update_trace_settings(settings={"trace_count": "50"})
    assert all(answer == echo | {"trace_count": "50"} for answer in everywhere(traced, "echo"))
    with grpcclient.InferenceServerClient(traced.grpc_address) as grpc:
        assert grpc_settings(grpc.get_trace_settings("other"))["trace_level"] == ["TIMESTAMPS"]
        cleared = grpc.update_trace_settings("echo", {"trace_level": None, "trace_rate": "9"})
        now = {"trace_level": ["TIMESTAMPS"], "trace_rate": "9", "trace_count": "50"}
        assert grpc_settings(cleared) == echo | now
    assert all(answer["trace_rate"] == "9" for answer in everywhere(traced, "echo"))
    assert all(answer["trace_rate"] == "4" for answer in everywhere(traced))


def test_aio_clients(traced: ServerProcess, http: httpclient.InferenceServerClient) -> None:
    async def run() -> tuple[Any, Any]:
        async with httpaio.InferenceServerClient(f"127.0.0.1:{traced.http_port}") as rest:
            changed = await rest.update_trace_settings("echo", {"trace_rate": "3"})
        grpc = grpcaio.InferenceServerClient(traced.grpc_address)
        try:
            read = await grpc.get_trace_settings("echo", as_json=True)
        finally:
            await grpc.close()
        return changed, read

    changed, read = asyncio.run(run())
    assert changed["trace_rate"] == "3"
    assert read["settings"]["trace_rate"] == {"value": ["3"]}


def test_what_cannot_be_set_is_refused_in_tritons_words(
    traced: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    refused = [
        ("nope", {"trace_rate": "2"}, "Request for unknown model : nope"),
        (None, {"trace_file": "/tmp/trace.json"}, "trace file location can not be updated"),
        (None, {"trace_rate": "fast"}, "Unable to parse 'trace_rate', got: 'fast'"),
        (None, {"trace_level": ["OFF", "TENSORS"]}, "Expect only one trace level 'OFF'"),
    ]
    with grpcclient.InferenceServerClient(traced.grpc_address) as grpc:
        for model, settings, words in refused:
            with pytest.raises(InferenceServerException, match=words) as over_rest:
                http.update_trace_settings(model, settings)
            assert over_rest.value.status() == "400"
            with pytest.raises(InferenceServerException, match=words) as over_grpc:
                grpc.update_trace_settings(model, settings)
            assert over_grpc.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert http.get_trace_settings() == DEFAULTS


def new_traceparent() -> tuple[bytes, str]:
    trace_id = os.urandom(16)
    return trace_id, f"00-{trace_id.hex()}-{os.urandom(8).hex()}-01"


def traced_requests(traced: ServerProcess, receiver: OtlpReceiver, models: list[str]) -> list[bool]:
    """Which of ``models``' requests (one each, in order) were traced. They go over one
    connection (one process counts them), then one to `other`, whose span arriving
    says theirs have been exported."""
    sent = []
    with httpx.Client(base_url=traced.url, timeout=30) as rest:
        for model in [*models, "other"]:
            trace_id, traceparent = new_traceparent()
            answer = rest.post(
                f"/v2/models/{model}/infer", json=BODY, headers={"traceparent": traceparent}
            )
            assert answer.status_code == 200, answer.text
            sent.append(trace_id)
    marker = sent.pop()
    receiver.wait_for(lambda spans: any(s.trace_id == marker for s in spans), "the marker's span")
    seen = {span.trace_id for span in receiver.spans() if span.name == REST_INFER}
    return [trace_id in seen for trace_id in sent]


def test_the_settings_decide_which_requests_are_traced(
    traced: ServerProcess, receiver: OtlpReceiver, http: httpclient.InferenceServerClient
) -> None:
    assert traced_requests(traced, receiver, ["echo", "echo"]) == [True, True]
    http.update_trace_settings("echo", {"trace_level": ["OFF"]})
    assert traced_requests(traced, receiver, ["echo", "echo"]) == [False, False]
    http.update_trace_settings("echo", {"trace_level": ["TIMESTAMPS"], "trace_rate": "2"})
    assert traced_requests(traced, receiver, ["echo"] * 4) == [False, True, False, True]
    http.update_trace_settings("echo", {"trace_rate": "1", "trace_count": "1"})
    assert traced_requests(traced, receiver, ["echo"] * 3) == [True, False, False]


def test_without_tracing_the_level_stays_off(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        assert client.get_trace_settings()["trace_level"] == ["OFF"]
        with pytest.raises(InferenceServerException, match="Tracing is off on this server"):
            client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
