"""SIGTERM under load: readiness false at once, new requests refused, every admitted
request answered, streams still running at the deadline ended cleanly, exit in time.

The server runs with ``shutdown_grace_seconds`` = 4: the cut (shutdown.py) comes
a third of it (1.33 s) before that, the exit before it.
"""

from __future__ import annotations

import http.client
import json
import queue
import re
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model, write_model_folder
from tests.support.polling import wait_for
from tests.support.procstat import children, is_running
from tests.support.serverproc import ServerProcess, http_status

from .metrics_helpers import model, scrape, value

GRACE = 4.0
CUT_AT = GRACE - GRACE / 3  # shutdown.cut_after(GRACE)
TIMEOUT = 30.0
SHUTTING_DOWN = "shutting down"
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
ENDLESS = {"count": 100_000, "delay_ms": 100}  # runs until the cut
FINITE = {"count": 5, "delay_ms": 150}  # ends within a second


def write_models(repository: Path) -> Path:
    """`slow` (one slot, in one worker; a request with `hold` keeps it until the file
    `open` exists) and `tokens` (streams `count` responses, `delay_ms` apart)."""
    add_custom_model(repository, "slow", "BatchRecorder", workers=1)
    add_custom_model(repository, "tokens", "Tokens")
    return repository


def slow_body(value: float, **parameters: Any) -> dict[str, Any]:
    x = {"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [[value]]}
    return {"inputs": [x], "parameters": parameters}


def rest_infer(server: ServerProcess, value: float, **parameters: Any) -> httpx.Response:
    url = f"{server.url}/v2/models/slow/infer"
    return httpx.post(url, json=slow_body(value, **parameters), timeout=TIMEOUT)


def grpc_request(model_name: str, request_id: str = "", **parameters: int) -> Any:
    x = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1, 1])
    return pb.ModelInferRequest(
        model_name=model_name,
        id=request_id,
        inputs=[x],
        raw_input_contents=[np.float32(7.0).tobytes()],
        parameters={k: pb.InferParameter(int64_param=v) for k, v in parameters.items()},
    )


class EventStream(threading.Thread):
    """Reads one SSE stream of `tokens` in a thread: each (event type, data, time)."""

    def __init__(self, server: ServerProcess, request_id: str, parameters: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.url = f"{server.url}/v2/models/tokens/infer_stream"
        self.body = {
            "id": request_id,
            "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}],
            "parameters": parameters,
        }
        self.events: list[tuple[str, dict[str, Any], float]] = []
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url, json=self.body, timeout=TIMEOUT) as sse:
                kind = "message"
                for line in sse.iter_lines():
                    if line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: "):
                        data = json.loads(line.removeprefix("data: "))
                        self.events.append((kind, data, time.monotonic()))
                        kind = "message"
        except BaseException as error:  # the test asserts there was none
            self.error = error

    def finished(self) -> list[tuple[str, dict[str, Any], float]]:
        self.join(TIMEOUT)
        assert not self.is_alive() and self.error is None, self.error
        return self.events


class GrpcStream(threading.Thread):
    """A ModelStreamInfer call read in a thread: its answers, then how it ended."""

    def __init__(self, channel: grpc.Channel) -> None:
        super().__init__(daemon=True)
        self.requests: queue.Queue[Any] = queue.Queue()
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        self.call = stub.ModelStreamInfer(iter(self.requests.get, None), timeout=TIMEOUT)
        self.answers: list[Any] = []
        self.ended: grpc.RpcError | None = None
        self.start()

    def run(self) -> None:
        try:
            for answer in self.call:
                self.answers.append(answer)
        except grpc.RpcError as error:
            self.ended = error

    def of(self, request_id: str) -> list[Any]:
        return [a for a in self.answers if a.infer_response.id == request_id]

    def finished(self) -> grpc.RpcError | None:
        self.join(TIMEOUT)
        assert not self.is_alive()
        self.requests.put(None)
        return self.ended


class HealthWatch(threading.Thread):
    """A grpc.health.v1 Watch of the server's readiness, its statuses as they come."""

    def __init__(self, channel: grpc.Channel) -> None:
        super().__init__(daemon=True)
        stub = health_pb2_grpc.HealthStub(channel)
        self.call = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT)
        self.statuses: list[int] = []
        self.start()

    def run(self) -> None:
        try:
            for answer in self.call:
                self.statuses.append(answer.status)
        except grpc.RpcError:
            pass  # the server ending the call early is fine: NOT_SERVING came first


def not_ready(server: ServerProcess) -> bool:
    """Readiness is false: a 503, or no longer listening (a probe fails either way)."""
    try:
        return http_status(f"{server.url}/v2/health/ready", timeout=1) != 200
    except (OSError, http.client.HTTPException):
        return True


def refuses_new_rest_requests(server: ServerProcess) -> bool:
    try:
        answer = rest_infer(server, 9.0)
    except httpx.TransportError:  # the socket is closed: refused
        return True
    assert answer.status_code == 503, answer.text
    assert SHUTTING_DOWN in answer.json()["error"]
    return True


def refuses_new_grpc_calls(server: ServerProcess) -> bool:
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            stub.ModelInfer(grpc_request("slow"), timeout=5)
        except grpc.RpcError as error:
            return bool(error.code() == grpc.StatusCode.UNAVAILABLE)
    return False


def queued(server: ServerProcess) -> float:
    return value(scrape(server.metrics_port), "batch_request_queue", **model("slow"))


def y_of(answer: httpx.Response) -> float:
    assert answer.status_code == 200, answer.text
    (y,) = [o for o in answer.json()["outputs"] if o["name"] == "y"]
    return float(y["data"][0])


def stopped_at_the_cut(server: ServerProcess) -> tuple[int, int]:
    """The requests and streams the cut stopped, as the protocol processes (or the lone
    server) log them, summed over them: with protocol processes, the two requests or
    streams of a test may land in two. The model host's own line (it runs the models
    set to use workers) counts what they forwarded again, so it is left out."""
    lines = [line for line in server.log().splitlines() if "[model host" not in line]
    found = re.findall(r"stopped (\d+) request\(s\) and (\d+) stream\(s\) still", "\n".join(lines))
    return sum(int(calls) for calls, _ in found), sum(int(streams) for _, streams in found)


@pytest.fixture
def threads() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "2-workers"])
def test_sigterm_answers_every_admitted_request_and_exits_within_the_grace_period(
    start: Any, repository: Path, threads: ThreadPoolExecutor, workers: int
) -> None:
    settings = {"parallel_workers": workers, "shutdown_grace_seconds": GRACE}
    server: ServerProcess = start(repository, settings=settings)
    slow = repository / "slow"
    channel = grpc.insecure_channel(server.grpc_address)
    # Admitted before the signal: one request running (held), three queued behind it...
    holder = threads.submit(rest_infer, server, 1.0, hold=True)
    wait_for((slow / "holding").exists, "the held request to run")
    rest_queued: list[Future[httpx.Response]] = [
        threads.submit(rest_infer, server, v) for v in (2.0, 3.0)
    ]
    grpc_queued = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer.future(
        grpc_request("slow"), timeout=TIMEOUT
    )
    wait_for(lambda: queued(server) == 3, "three requests to queue")
    # ...two SSE streams and one gRPC stream of two requests, one of each endless.
    finite_sse = EventStream(server, "finite", FINITE)
    endless_sse = EventStream(server, "endless", ENDLESS)
    grpc_stream = GrpcStream(channel)
    grpc_stream.requests.put(grpc_request("tokens", "finite", **FINITE))
    grpc_stream.requests.put(grpc_request("tokens", "endless", **ENDLESS))
    watch = HealthWatch(channel)
    wait_for(
        lambda: finite_sse.events and endless_sse.events and grpc_stream.of("endless"),
        "every stream's first response",
    )

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)

    wait_for(lambda: not_ready(server), "readiness to turn false", timeout=2)
    wait_for(lambda: NOT_SERVING in watch.statuses, "the health watch to say NOT_SERVING", 2)
    assert refuses_new_rest_requests(server) and refuses_new_grpc_calls(server)
    assert not holder.done(), "the drain has to wait for it"
    (slow / "open").touch()  # the held request finishes, then the queued ones run
    assert server.process.wait(GRACE + 1) == 0
    exited = time.monotonic() - signalled
    assert exited < GRACE, f"exited {exited:.2f}s after SIGTERM:\n{server.log()}"

    assert [y_of(f.result()) for f in (holder, *rest_queued)] == [2.0, 4.0, 6.0]
    assert np.frombuffer(grpc_queued.result().raw_output_contents[0], np.float32) == [14.0]
    finite = finite_sse.finished()
    assert [kind for kind, _, _ in finite] == ["message"] * FINITE["count"]
    endless = endless_sse.finished()
    *served, (kind, last, when) = endless
    assert len(served) > 5 and {kind for kind, _, _ in served} == {"message"}
    assert kind == "error" and SHUTTING_DOWN in last["error"], last
    assert when - signalled > CUT_AT - 0.3, "the stream was served until the deadline"
    ended = grpc_stream.finished()
    assert ended is not None and ended.code() == grpc.StatusCode.UNAVAILABLE
    assert [a.error_message for a in grpc_stream.of("finite")] == [""] * FINITE["count"]
    *served_grpc, cut = grpc_stream.of("endless")
    assert len(served_grpc) > 5 and SHUTTING_DOWN in cut.error_message
    # Each protocol process says what it stopped: the two endless streams, in one
    # process or in two.
    assert stopped_at_the_cut(server) == (0, 2)
    channel.close()


def test_requests_still_running_at_the_deadline_are_stopped_and_busy_workers_die(
    start: Any, repository: Path, threads: ThreadPoolExecutor
) -> None:
    # The server's own workers: with forked ones (fork_workers, the default from 2
    # workers) the exit after busy workers were stopped at the deadline overshoots
    # the grace by 0.05-0.5 s (issue 33's report: not fixed yet).
    settings = {"parallel_workers": 2, "shutdown_grace_seconds": GRACE, "fork_workers": False}
    server: ServerProcess = start(repository, settings=settings)
    workers = children(server.process.pid)
    # `slow` holds its request in a worker until `open` exists, which it never will.
    running = threads.submit(rest_infer, server, 1.0, hold=True)
    wait_for((repository / "slow" / "holding").exists, "the held request to run")
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        waiting = stub.ModelInfer.future(grpc_request("slow"), timeout=TIMEOUT)
        wait_for(lambda: queued(server) == 1, "a request to queue")
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.RpcError) as cut:
            waiting.result()
    assert running.result().status_code == 503
    assert SHUTTING_DOWN in running.result().json()["error"]
    assert cut.value.code() == grpc.StatusCode.UNAVAILABLE
    assert SHUTTING_DOWN in cut.value.details()
    assert time.monotonic() - signalled > CUT_AT - 0.1
    assert server.process.wait(GRACE + 1) == 0
    exited = time.monotonic() - signalled
    assert exited < GRACE, f"exited {exited:.2f}s after SIGTERM:\n{server.log()}"
    assert stopped_at_the_cut(server) == (2, 0)
    wait_for(lambda: not any(is_running(pid) for pid in workers), "the workers to exit", 2)


def test_a_second_sigterm_stops_at_once(start: Any, repository: Path) -> None:
    server: ServerProcess = start(repository, settings={"shutdown_grace_seconds": 60})
    endless = EventStream(server, "endless", ENDLESS)
    wait_for(lambda: endless.events, "the stream's first response")
    server.process.send_signal(signal.SIGTERM)
    wait_for(lambda: not_ready(server), "readiness to turn false", timeout=2)
    assert endless.is_alive(), "the first signal lets the stream go on"

    again = time.monotonic()
    server.process.send_signal(signal.SIGTERM)

    server.process.wait(TIMEOUT)
    # Its answers get HURRY_SECONDS (0.5 s) to go out; the whole server ends then, with
    # protocol processes too (each exits at once; the supervisor right after).
    took = time.monotonic() - again
    assert took < 0.8, f"exited {took:.2f}s after the second SIGTERM:\n{server.log()}"
    kind, last, _ = endless.finished()[-1]
    assert kind == "error" and SHUTTING_DOWN in last["error"]
    assert "Received SIGTERM again: stopped 0 request(s) and 1 stream(s)" in server.log()


# A plain def predict: with 0 workers it runs on the event loop and blocks it.
BLOCKING_RUNTIME = """
import time
from pathlib import Path

from inferd import InferenceResponse, Model


class Blocking(Model):
    calls = 0

    def predict(self, request):
        Blocking.calls += 1
        if Blocking.calls == 1:  # measured quick: the next calls run on the event loop
            return InferenceResponse(outputs=[])
        (Path(__file__).parent / "blocking").touch()
        time.sleep(30)
        return InferenceResponse(outputs=[])
"""


def test_the_deadline_holds_while_a_model_blocks_the_event_loop(
    start: Any, tmp_path: Path, threads: ThreadPoolExecutor
) -> None:
    files = {"blocking.py": BLOCKING_RUNTIME}
    folder = write_model_folder(tmp_path / "models", "blocking", "blocking.Blocking", files=files)
    server: ServerProcess = start(folder.parent, settings={"shutdown_grace_seconds": 1.5})
    url = f"{server.url}/v2/models/blocking/infer"
    body = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    blocking = folder / "blocking"
    sent: list[Future[httpx.Response]] = []
    # Each on a new connection until one blocks: with protocol processes, each process's
    # first call is measured quick, and a request may land in any of them.
    while not blocking.exists():
        sent.append(threads.submit(httpx.post, url, json=body, timeout=TIMEOUT))
        wait_for(lambda: sent[-1].done() or blocking.exists(), "an answer or the model blocking")
        assert len(sent) < 50, "no request blocked the event loop"
    *quick, blocked = sent
    assert quick and all(answer.result().status_code == 200 for answer in quick)

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)

    assert server.process.wait(TIMEOUT) == 1
    # At the deadline, give or take a fifth of a second: the whole server, with protocol
    # processes too (the supervisor exits right after the one that was held).
    took = time.monotonic() - signalled
    log = server.log()
    assert took < 1.5 + 0.2, f"exited {took:.2f}s after SIGTERM:\n{log}"
    assert "did not stop by its shutdown deadline (1 request(s) and 0 stream(s)" in log, log
    with pytest.raises(httpx.TransportError):
        blocked.result()
