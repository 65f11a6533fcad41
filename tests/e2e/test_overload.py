"""10x overload: the queue bound refuses the excess at once; the admitted keep their tails.

A model of known service time (10 ms in one worker process: about 100 requests/s)
is sent 1000 requests/s, open-loop, for 1.5 s. The server-wide ``max_queue_size``
(settings.json) bounds its queue; another model's own bound replaces it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from benchmarks.openload import Answer, run_drive
from benchmarks.servers import group_rss_bytes
from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess

SERVICE_S = 0.01
SERVER_BOUND = 8
OWN_BOUND = 2
RATE = 1000  # requests/s: 10x what one worker serves at 10 ms each
SECONDS = 1.5
# The longest an admitted request may take: SERVER_BOUND + 1 requests of 10 ms ahead of
# it (~0.1 s), with room for stalls of a shared 2-core machine. Unbounded: ~13 s.
ADMITTED_P99_S = 3.0
REFUSED_P50_S = 0.25  # "at once": not after waiting for a slot
RSS_GROWTH = 40 * 2**20  # bytes the server may grow by over the run


def body(index: int) -> bytes:
    tensor = {"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [float(index)]}
    return json.dumps({"inputs": [tensor]}).encode()


def answered(answer: Answer) -> float:
    (output,) = json.loads(answer.body)["outputs"]
    return float(output["data"][0])


def start_overloadable(start: Any, tmp_path: Path) -> ServerProcess:
    repository = tmp_path / "models"
    extra = {"parameters": {"extra": {"seconds": SERVICE_S}}}
    add_custom_model(repository, "shared", "Sleeps", **extra)
    add_custom_model(repository, "own", "Sleeps", max_queue_size=OWN_BOUND, **extra)
    settings = {"parallel_workers": 1, "max_queue_size": SERVER_BOUND}
    return start(repository, settings=settings)


def rss(server: ServerProcess) -> int:
    resident = group_rss_bytes(server.process.pid)
    assert resident is not None, "no /proc to read the server's memory from"
    return resident


def grpc_refusal(server: ServerProcess, overloaded: Callable[[], bool]) -> grpc.RpcError | None:
    """The first gRPC call to the model refused while ``overloaded()``; None if none was."""
    request = pb.ModelInferRequest(
        model_name="shared",
        inputs=[pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1, 1])],
        raw_input_contents=[np.array([1.0], dtype=np.float32).tobytes()],
    )
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        while overloaded():
            try:
                stub.ModelInfer(request, timeout=10)
            except grpc.RpcError as error:
                return error
    return None


def test_ten_times_the_load_is_refused_at_once_and_the_admitted_keep_their_tails(
    start: Any, tmp_path: Path
) -> None:
    server = start_overloadable(start, tmp_path)
    url = f"{server.url}/v2/models/shared/infer"
    warm = run_drive(url, body, rate=50, seconds=0.2)
    assert {a.status for a in warm.answers} == {200}
    before = rss(server)
    with ThreadPoolExecutor(1) as load:
        driving = load.submit(run_drive, url, body, RATE, SECONDS, 2000)
        refused = grpc_refusal(server, lambda: not driving.done())
        run = driving.result()
    growth = rss(server) - before

    assert refused is not None, "no gRPC call was refused while the model was overloaded"
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, refused.details()
    assert "queue of model 'shared' is full (8 requests waiting)" in refused.details()
    assert ("grpc-retry-pushback-ms", "1000") in refused.trailing_metadata()

    statuses = {status: sum(a.status == status for a in run.answers) for status in (200, 503)}
    assert run.unsent == 0 and sum(statuses.values()) == len(run.answers), statuses
    admitted = [a for a in run.answers if a.status == 200]
    turned_away = [a for a in run.answers if a.status == 503]
    assert len(turned_away) > len(run.answers) // 2, statuses
    assert {a.retry_after for a in turned_away} == {1.0}
    assert float(np.median([a.latency_s for a in turned_away])) < REFUSED_P50_S
    assert all(answered(a) == 2 * a.index for a in admitted), "an admitted answer was wrong"
    message = json.loads(turned_away[0].body)["error"]
    assert message.endswith("raise max_queue_size in settings.json (for every model)")
    p99 = float(np.percentile([a.latency_s for a in admitted], 99))
    assert p99 < ADMITTED_P99_S, f"admitted p99 {p99:.3f}s"
    assert growth < RSS_GROWTH, f"the server grew by {growth / 2**20:.0f} MiB"


def test_a_models_own_bound_replaces_the_servers(start: Any, tmp_path: Path) -> None:
    server = start_overloadable(start, tmp_path)
    burst = run_drive(f"{server.url}/v2/models/own/infer", body, rate=2000, seconds=0.05)
    turned_away = [a for a in burst.answers if a.status == 503]
    assert turned_away, [a.status for a in burst.answers]
    message = json.loads(turned_away[0].body)["error"]
    assert "queue of model 'own' is full (2 requests waiting)" in message
    assert message.endswith("raise max_queue_size in its model-settings.json")
    admitted = [a for a in burst.answers if a.status == 200]
    assert admitted and all(answered(a) == 2 * a.index for a in admitted)
