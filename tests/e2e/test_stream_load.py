"""Streams under load through worker processes: nothing lost, nothing doubled, no leak.

A real server with ``parallel_workers`` 2 serves 200 concurrent streams of 50
responses each, half over REST server-sent events (httpx), half over gRPC
ModelStreamInfer in Triton's decoupled mode (grpcio, each stream ending with the
empty final response it asks for). Every stream must get 0..49 in order from a
worker process, and the server's main process must not grow from one such run to
the next: its RSS after a run stays within 10% of its RSS after a warm-up run.

The streaming benchmark's own load (``python -m benchmarks streaming``) runs
briefly against inferd too, so its clients keep reading what the server sends.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.procstat import serving_processes, workers
from tests.support.serverproc import ServerProcess, server_environment, start_server

ROOT = Path(__file__).resolve().parents[2]
STREAMS = 200  # half over SSE, half over gRPC
RESPONSES = 50
RUN_TIMEOUT = 40.0  # seconds for one run of every stream; a healthy run takes a few
RSS_GROWTH = 1.10
FINAL = "triton_final_response"
REQUEST = {"inputs": [{"name": "n", "shape": [1], "datatype": "INT32", "data": [RESPONSES]}]}

# One stream's answers: (i, pid) per response, in the order they came.
Answers = list[tuple[int, int]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("stream-load")
    add_custom_model(repository, "count", "CountStream")
    with start_server(repository, settings={"parallel_workers": 2}) as process:
        yield process


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


async def sse_stream(client: httpx.AsyncClient) -> Answers:
    async with client.stream("POST", "/v2/models/count/infer_stream", json=REQUEST) as answer:
        body = await answer.aread()
    assert answer.status_code == 200, body[:500]
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [event for event in body.split(b"\n\n") if event.strip()]
    answers = []
    for event in events:
        assert event.startswith(b"data: "), event[:200]
        outputs = {o["name"]: o["data"][0] for o in json.loads(event[6:])["outputs"]}
        answers.append((int(outputs["i"]), int(outputs["pid"])))
    return answers


def grpc_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="count")
    request.inputs.add(name="n", datatype="INT32", shape=[1]).contents.int_contents.append(
        RESPONSES
    )
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def output_value(response: pb.ModelInferResponse, name: str) -> int:
    index = next(i for i, o in enumerate(response.outputs) if o.name == name)
    dtype = np.int32 if response.outputs[index].datatype == "INT32" else np.int64
    if response.raw_output_contents:
        return int(np.frombuffer(response.raw_output_contents[index], dtype=dtype)[0])
    contents = response.outputs[index].contents
    return int((contents.int_contents or contents.int64_contents)[0])


async def grpc_stream(stub: Any) -> Answers:
    answers, finals = [], []
    async for message in stub.ModelStreamInfer(iter((grpc_request(),))):
        assert not message.error_message, message.error_message
        response = message.infer_response
        finals.append(response.parameters[FINAL].bool_param)
        if response.outputs:
            answers.append((output_value(response, "i"), output_value(response, "pid")))
    # Each response says it is not the last; an empty one then closes the stream.
    assert finals == [False] * len(answers) + [True], finals
    return answers


async def run_streams(server: ServerProcess) -> list[Answers]:
    """Every stream at once, half over each protocol."""
    half = STREAMS // 2
    limits = httpx.Limits(max_connections=half, max_keepalive_connections=half)
    async with (
        httpx.AsyncClient(base_url=server.url, limits=limits, timeout=RUN_TIMEOUT) as client,
        grpc.aio.insecure_channel(server.grpc_address) as channel,
    ):
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        streams = [sse_stream(client) for _ in range(half)]
        streams += [grpc_stream(stub) for _ in range(STREAMS - half)]
        return await asyncio.wait_for(asyncio.gather(*streams), RUN_TIMEOUT)


def check_every_stream(server: ServerProcess, streams: list[Answers]) -> None:
    assert len(streams) == STREAMS
    for answers in streams:
        assert [i for i, _ in answers] == list(range(RESPONSES))  # in order, none lost or doubled
    assert sum(len(answers) for answers in streams) == STREAMS * RESPONSES
    pids = {pid for answers in streams for _, pid in answers}
    # The streams ran in the server's worker processes (under the model host, with
    # protocol processes).
    assert pids <= workers(server.process.pid)


def test_200_streams_through_workers_arrive_whole_in_order_and_leave_no_growth(
    server: ServerProcess,
) -> None:
    warm_up = asyncio.run(run_streams(server))
    check_every_stream(server, warm_up)
    # What holds the connections: the lone server, or its protocol processes.
    serving = serving_processes(server.process.pid)
    rss_after_warm_up = sum(rss_kib(pid) for pid in serving)

    measured = asyncio.run(run_streams(server))
    check_every_stream(server, measured)
    rss_after = sum(rss_kib(pid) for pid in serving)
    assert rss_after <= rss_after_warm_up * RSS_GROWTH, (rss_after_warm_up, rss_after)


def test_the_streaming_benchmark_counts_right_streams_over_both_transports(tmp_path: Path) -> None:
    out = tmp_path / "streaming.json"
    # Long enough for a stream to finish on a busy 2-core machine (its clients start slowly).
    brief = ["--rounds", "1", "--duration", "3", "--warmup", "0", "--connections", "4"]
    options = ["--only", "inferd", "--workers", "0", "--responses", "20", *brief]
    command = [sys.executable, "-m", "benchmarks", "streaming", *options, "--json-out", str(out)]
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [(run["case"], run["label"]) for run in runs] == [
        ("grpc c4", "inferd pw=0"),
        ("sse c4", "inferd pw=0"),
    ]
    for run in runs:
        assert run["unit"] == "resp" and run["errors"] == 0 and run["streams"] > 0
        assert run["requests"] == 20 * run["streams"]
