"""A model run by the model host behaves, through two protocol processes, as on a
lone server (docs/design.md "The model host").

`guarded` (one worker slot, a bounded queue: test_batching's) cannot be copied into
each protocol process (it sets ``workers``), so the host runs it and each protocol
process forwards its requests there. A client that leaves while its request waits
in the host's queue takes it out unrun, as on a lone server: a gRPC call whose
deadline passes, an HTTP client that disconnects (the protocol process sends the
host a CANCEL of the forwarded call). `tokens` (an MLServer MLModel that sets
``workers``) keeps one response cache and one copy of its custom route's state for
every process's clients, and its response headers come back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest
import tritonclient.grpc as triton

from tests.support.models import write_model_folder
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from . import test_batching
from .test_batching import fill_check, infer, outputs, queued, ran, write_models
from .test_response_cache_routes import MLMODEL_RUNTIME, ROW

# test_batching's fixture (on this module's server and client): guarded's one slot,
# busy until the test calls the opener it returns.
held = test_batching.held

# Well under guarded's queue timeout (20 s), after which a request left in the queue
# would leave it anyway, unrun.
LEFT_WITHIN = 10.0


def queue_empty(server: ServerProcess) -> Callable[[], bool]:
    return lambda: queued(server) == 0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = write_models(tmp_path_factory.mktemp("model-host"))
    files = {"models.py": MLMODEL_RUNTIME}
    write_model_folder(
        repository, "tokens", "models.TokenModel", files=files, cache_enabled=True, workers=1
    )
    settings = {"protocol_processes": 2, "cache_enabled": True, "cache_size": 10}
    with start_server(repository, settings) as process:
        yield process


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    limits = httpx.Limits(max_connections=16)
    with httpx.Client(base_url=server.url, timeout=30, limits=limits) as client:
        yield client


def test_a_cancelled_grpc_call_leaves_the_hosts_queue(
    server: ServerProcess, client: httpx.Client, held: Callable[[], None]
) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = triton.service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = triton.service_pb2.ModelInferRequest(model_name="guarded")
        tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 1])
        tensor.contents.fp32_contents.append(8.0)
        with pytest.raises(grpc.RpcError) as cancelled:
            stub.ModelInfer(request, timeout=0.5)
        assert cancelled.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(queue_empty(server), "the cancelled call to leave the host's queue", LEFT_WITHIN)
    held()
    outputs(infer(client, "guarded", [[5.0]]))
    assert ran(server) == ["-1.0", "5.0"]


def test_a_disconnected_http_client_leaves_the_hosts_queue(
    server: ServerProcess, client: httpx.Client, held: Callable[[], None]
) -> None:
    with (
        httpx.Client(base_url=server.url, timeout=0.5) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        infer(impatient, "guarded", [[7.0]])
    wait_for(queue_empty(server), "the disconnected request to leave", LEFT_WITHIN)
    held()
    outputs(infer(client, "guarded", [[5.0]]))
    assert ran(server) == ["-1.0", "5.0"]


def test_the_hosts_queue_still_fills_and_refuses(
    client: httpx.Client, held: Callable[[], None]
) -> None:
    with ThreadPoolExecutor(3) as threads:
        waiting = [threads.submit(infer, client, "guarded", [[float(n)]]) for n in range(3)]
        wait_for(lambda: fill_check(client), "the host's queue to fill")
        held()
        assert all(future.result().status_code == 200 for future in waiting)


def test_a_hosted_models_cache_and_custom_route_are_one_for_every_process(
    server: ServerProcess,
) -> None:
    # Fresh connections: the kernel spreads them over both protocol processes.
    answers = [
        httpx.post(f"{server.url}/v2/models/tokens/infer", json={"inputs": [ROW]}, timeout=30)
        for _ in range(6)
    ]
    assert all(answer.status_code == 200 for answer in answers), answers[0].text
    tokens = {answer.json()["outputs"][0]["data"][0] for answer in answers}
    assert len(tokens) == 1, "the host's one cache answered every process's requests"
    assert {answer.headers["x-token"] for answer in answers} == {str(tokens.pop())}
    bumps = [
        httpx.post(f"{server.url}/counter/bump", json={"same": "body"}, timeout=30)
        for _ in range(4)
    ]
    assert [(bump.status_code, bump.json()) for bump in bumps] == [
        (200, {"calls": calls}) for calls in (1, 2, 3, 4)
    ], "one copy of the model counts every process's calls, none from the cache"
