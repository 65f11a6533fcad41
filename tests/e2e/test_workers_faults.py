"""Nothing lost when workers die: requests in flight are retried once, calls past their
inference_timeout answer 504 and their worker is restarted, pw0 refuses the timeout."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import workers
from tests.support.serverproc import ServerProcess, write_settings

from .metrics_helpers import model, scrape, value
from .test_settings_e2e import assert_refused, run_inferd

REQUEST_DEADLINE = 30.0
CLIENTS = 16
LIMIT = 0.5  # the inference_timeout of the `slow` model, seconds


def echo_body(values: list[int], **parameters: Any) -> dict[str, Any]:
    tensor = {"name": "x", "datatype": "INT64", "shape": [len(values)], "data": values}
    return {"inputs": [tensor], "parameters": parameters}


def echoed(response: httpx.Response) -> tuple[list[int], int]:
    """The echoed ``x`` and the pid of the worker that answered."""
    outputs = {output["name"]: output["data"] for output in response.json()["outputs"]}
    return outputs["x"], int(outputs["pid"][0])


# A worker SIGKILLed under load


class Client(threading.Thread):
    """Sends numbered echo requests until told to stop; keeps every outcome."""

    def __init__(self, server: ServerProcess, number: int, stop: threading.Event) -> None:
        super().__init__(name=f"client-{number}")
        self.server, self.number, self.stop = server, number, stop
        self.outcomes: list[tuple[list[int], httpx.Response | Exception]] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=REQUEST_DEADLINE) as client:
            sequence = 0
            while not self.stop.is_set():
                sent = [self.number, sequence]
                try:
                    answer: Any = client.post("/v2/models/echo/infer", json=echo_body(sent))
                except httpx.HTTPError as error:  # a hang (timeout) or a dropped connection
                    answer = error
                self.outcomes.append((sent, answer))
                sequence += 1


def test_a_worker_killed_under_16_clients_loses_no_request(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    # Four requests at once per worker: the killed one dies with four in flight.
    echo = {"threads_per_worker": 4, "parameters": {"extra": {"sleep": 0.02}}}
    add_custom_model(tmp_path, "echo", "SlowEcho", **echo)
    server = start(tmp_path, settings={"parallel_workers": 2})
    before = wait_for(lambda: len(found := workers(server.process.pid)) == 2 and found, "workers")
    stop = threading.Event()
    clients = [Client(server, number, stop) for number in range(CLIENTS)]
    for client in clients:
        client.start()

    def answers() -> list[httpx.Response]:
        return [a for c in clients for _, a in c.outcomes if isinstance(a, httpx.Response)]

    try:
        wait_for(lambda: len(answers()) >= 2 * CLIENTS, "requests flowing")
        victim = echoed(answers()[-1])[1]
        # Stopped first, so that it surely holds four requests when it dies: the moment
        # one of its slots frees, the main process sends it the next request queued.
        os.kill(victim, signal.SIGSTOP)
        time.sleep(0.2)
        os.kill(victim, signal.SIGKILL)
        (restarted,) = wait_for(lambda: workers(server.process.pid) - before, "a new worker")
        wait_for(
            lambda: any(echoed(a)[1] == restarted for a in answers()),
            "the restarted worker serving",
        )
    finally:
        stop.set()
        for client in clients:
            client.join(REQUEST_DEADLINE + 5)
    assert not any(client.is_alive() for client in clients), "a request hung"
    outcomes = [outcome for client in clients for outcome in client.outcomes]
    failed = [(sent, a) for sent, a in outcomes if not isinstance(a, httpx.Response)]
    failed += [(sent, a.text) for sent, a in outcomes
               if isinstance(a, httpx.Response) and a.status_code != 200]  # fmt: skip
    assert failed == [], "no request failed"
    answered = [(sent, a) for sent, a in outcomes if isinstance(a, httpx.Response)]
    wrong = [(sent, echoed(a)) for sent, a in answered if echoed(a)[0] != sent]
    assert wrong == [], "every answer is the right one"
    retried = "stopped while running a request of model 'echo'; sending it again"
    # Each request it was running was sent again: at most its four slots' (fewer when the
    # main process had not yet handed it a fourth within the 0.2 s it was stopped).
    assert 1 <= server.log().count(retried) <= 4, "the requests it was running, sent again"


# inference_timeout


@pytest.fixture
def timed_server(tmp_path: Path, start: Callable[..., ServerProcess]) -> ServerProcess:
    """One worker holding `slow` (inference_timeout 0.5s) and two models without a
    limit: `steady` (retried) and `once` (retry_on_worker_failure: false)."""
    add_custom_model(tmp_path, "slow", "SlowEcho", inference_timeout=LIMIT, threads_per_worker=2)
    add_custom_model(tmp_path, "steady", "SlowEcho", threads_per_worker=2)
    add_custom_model(
        tmp_path, "once", "SlowEcho", threads_per_worker=2, retry_on_worker_failure=False
    )
    return start(tmp_path, settings={"parallel_workers": 1})


def post(server: ServerProcess, name: str, values: list[int], **parameters: Any) -> httpx.Response:
    url = f"{server.url}/v2/models/{name}/infer"
    return httpx.post(url, json=echo_body(values, **parameters), timeout=REQUEST_DEADLINE)


def served(server: ServerProcess, name: str) -> bool:
    return post(server, name, [1]).status_code == 200


def test_a_call_past_inference_timeout_is_504_its_worker_restarts_and_others_are_retried(
    timed_server: ServerProcess, tmp_path: Path
) -> None:
    server = timed_server
    first_pid = echoed(post(server, "steady", [0]))[1]
    with ThreadPoolExecutor(2) as running:
        in_flight: dict[str, Future[httpx.Response]] = {}
        for name in ("steady", "once"):
            started = tmp_path / f"{name}-started"
            in_flight[name] = running.submit(
                post, server, name, [7, 8], sleep=3.0, started=str(started)
            )
            wait_for(started.exists, f"the {name} request running")
        began = time.monotonic()
        timed_out = post(server, "slow", [1], sleep=30)
        took = time.monotonic() - began
        steady, once = in_flight["steady"].result(), in_flight["once"].result()

    assert timed_out.status_code == 504, timed_out.text
    reason = f"model 'slow' ran past its inference_timeout of {LIMIT:g}s"
    assert timed_out.json()["error"] == (
        f"Model 'slow' ran past its inference_timeout of {LIMIT:g}s; the worker process "
        f"running it (worker 0 (pid {first_pid})) was killed and is being restarted"
    )
    assert LIMIT <= took < LIMIT + 5
    assert steady.status_code == 200, steady.text
    assert echoed(steady)[0] == [7, 8] and echoed(steady)[1] != first_pid, "retried, restarted"
    assert once.status_code == 503, once.text
    assert f"stopped before answering (the server killed it: {reason})" in once.json()["error"]
    wait_for(lambda: served(server, "slow"), "the next request served")

    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        tensor = pb.ModelInferRequest.InferInputTensor(
            name="x",
            datatype="INT64",
            shape=[1],
            contents=pb.InferTensorContents(int64_contents=[1]),
        )
        sleep = pb.InferParameter(double_param=30.0)
        request = pb.ModelInferRequest(
            model_name="slow", inputs=[tensor], parameters={"sleep": sleep}
        )
        with pytest.raises(grpc.RpcError) as raised:
            stub.ModelInfer(request, timeout=REQUEST_DEADLINE)
    assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert raised.value.details().startswith(
        f"Model 'slow' ran past its inference_timeout of {LIMIT:g}s"
    )
    wait_for(lambda: served(server, "slow"), "served again")

    samples = scrape(server.metrics_port)
    assert value(samples, "model_inference_timeouts_total", **model("slow")) == 2
    assert value(samples, "model_inference_timeouts_total", **model("steady")) == 0
    assert value(samples, "worker_restarts_total", worker="0") == 2
    log = server.log()
    assert f"was killed by the server: {reason}; restarting it in 0.00s" in log, log
    assert log.count("Killing worker 0 (pid ") == 2


# parallel_workers: 0 cannot stop a call: the setting is refused


def test_pw0_refuses_inference_timeout_at_start_up(tmp_path: Path) -> None:
    write_settings(tmp_path, {"parallel_workers": 0})
    add_custom_model(tmp_path, "timed", "SlowEcho", inference_timeout=2)
    assert_refused(
        run_inferd(tmp_path),
        "model 'timed' sets inference_timeout (2s), which needs worker processes",
        "parallel_workers: 0",
        str(tmp_path / "timed" / "model-settings.json"),
    )


def test_pw0_refuses_inference_timeout_from_the_environment(tmp_path: Path) -> None:
    write_settings(tmp_path, {"parallel_workers": 0})
    add_custom_model(tmp_path, "plain", "SlowEcho")
    refused = run_inferd(tmp_path, {"INFERD_MODEL_INFERENCE_TIMEOUT": "1.5"})
    assert_refused(refused, "model 'plain' sets inference_timeout (1.5s)")
    assert "INFERD_MODEL_INFERENCE_TIMEOUT" in refused.stderr


def test_pw0_refuses_a_repository_load_with_inference_timeout(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    add_custom_model(tmp_path, "plain", "SlowEcho")
    server = start(tmp_path, settings={"parallel_workers": 0})
    add_custom_model(tmp_path, "timed", "SlowEcho", inference_timeout=2)
    response = httpx.post(f"{server.url}/v2/repository/models/timed/load", timeout=30)
    assert response.status_code == 400, response.text
    assert "model 'timed' sets inference_timeout (2s)" in response.json()["error"]
    assert served(server, "plain")
