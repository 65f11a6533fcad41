"""Streaming: responses/s of a model that yields small responses as fast as it can."""

from __future__ import annotations

import argparse
import http.client
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from benchmarks.common.serverproc import ServerProcess

from ..repository import write_count_model
from ..servers import FLOOR, INFERD, MLSERVER, TRITON, Contender, baseline_pairs, with_baseline
from ..sse import sse_events
from ..streamclient import GRPC, SSE, STREAM_INFER_PATH
from ..streamload import TRANSPORTS, StreamLoad, StreamTarget
from ..streamwire import StreamError, event_data, grpc_reader, sse_value, stream_problem
from .base import Case, Scenario, VerificationError

MODEL = "count"
ANCHOR = "mlserver pw=0"  # MLServer streams only in its main process
TARGET_RATIO = 3.0  # what inferd is built to reach against MLServer here
FINAL_RESPONSE_PARAMETER = "triton_enable_empty_final_response"
# Triton's Python backend in decoupled mode (--triton-python): the count model, each
# response sent as made, as inferd's ModelStreamInfer answers it.
TRITON_CONFIG = """backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "n" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "i" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
TRITON_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "n").as_numpy().reshape(-1)[0])
            for index in range(count):
                output = pb_utils.Tensor("i", np.array([index], np.int32))
                sender.send(pb_utils.InferenceResponse([output]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


class Streaming(Scenario):
    name = "streaming"
    description = """Streaming: responses/s over gRPC ModelStreamInfer and REST SSE.

A model answers each request holding N (--responses) with N responses of one
INT32 each, 0..N-1, yielded as fast as the server takes them. inferd runs it at
each --workers value (in-process, and streaming through worker processes);
MLServer at parallel_workers 0 (it cannot stream through workers). The load is
--clients processes keeping --connections streams going in all; each checks
that every stream got exactly 0..N-1 in order, and only right streams count.
gRPC: one request per call, the call half-closed at once (inferd answers with
ModelStreamInferResponses, MLServer with bare ModelInferResponses). SSE: POST
/v2/models/count/infer_stream on keep-alive connections. Rates are responses/s;
p50/p99 are per stream, from its request to its last response.

--reference adds grpc_floor_server.py to the gRPC cases: grpcio's asyncio server
with one handler that parses each request and yields N serialized answers, and
nothing else. No server on grpcio streams faster here, so floor/mlserver is the
most any such server can show against MLServer over gRPC."""
    defaults = {"duration": 5.0, "warmup": 2.0, "rounds": 2}
    varies = frozenset({"parallel_workers"})
    load_tool = "streams"
    model = MODEL
    settings = {"debug": False}

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS))
        parser.add_argument("--responses", type=int, default=100, help="responses per stream (N)")
        parser.add_argument("--clients", type=int, default=2, help="load processes")
        parser.add_argument(
            "--workers",
            type=int,
            nargs="+",
            default=[0, 1],
            help="inferd's parallel_workers values (MLServer: 0)",
        )
        parser.add_argument(
            "--reference",
            action="store_true",
            help="also run grpc_floor_server.py (grpcio streaming alone) in the gRPC cases",
        )
        parser.add_argument(
            "--triton-python",
            default=os.environ.get("INFERD_BENCH_TRITON_PYTHON"),
            help="also run Triton (decoupled Python backend) in the gRPC cases: a Python "
            "with nvidia-pytriton (see grpc-floor)",
        )
        parser.add_argument(
            "--final-response",
            action="store_true",
            help=f"inferd's gRPC requests set {FINAL_RESPONSE_PARAMETER}",
        )

    def contenders(self) -> list[Contender]:
        contenders = []
        for server in self.options.servers:
            workers = self.options.args.workers if server == INFERD else [0]
            contenders += [
                Contender(f"{server} pw={n}", server, {"parallel_workers": n}) for n in workers
            ]
        return contenders

    def cases(self) -> list[Case]:
        contenders = tuple(with_baseline(self.contenders(), self.options.baseline_src))
        args = self.options.args
        floor: tuple[Contender, ...] = (Contender(FLOOR, FLOOR),) if args.reference else ()
        floor += (Contender(TRITON, TRITON),) if args.triton_python else ()
        return [
            Case(
                f"{transport} c{n}",
                contenders + (floor if transport == GRPC else ()),
                StreamLoad(n, args.clients),
                MODEL,
            )
            for transport in args.transports
            for n in self.options.connections
        ]

    def describe(self) -> str:
        args = self.options.args
        return (
            f"{super().describe()}, {args.responses} responses/stream, {args.clients} load "
            f"processes, inferd parallel_workers {args.workers}"
        )

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        if contender.kind == TRITON:
            (repo / MODEL / "1").mkdir(parents=True)
            (repo / MODEL / "1" / "model.py").write_text(TRITON_MODEL)
            (repo / MODEL / "config.pbtxt").write_text(TRITON_CONFIG)
            return
        implementation = "CountMLServer" if contender.kind == MLSERVER else "CountInferd"
        write_count_model(repo, f"count.{implementation}", MODEL)

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> StreamTarget:
        responses = self.options.args.responses
        if case.name.startswith(GRPC):
            final = self.options.args.final_response and contender.kind == INFERD
            body = grpc_request(responses, final)
            wrapped = contender.kind != MLSERVER
            check_grpc(server.grpc_address, body, responses, wrapped, final)
            url = f"http://{server.grpc_address}{STREAM_INFER_PATH}"
            return StreamTarget(url, body, 0, GRPC, responses, wrapped, final)
        path = f"/v2/models/{MODEL}/infer_stream"
        body = json_request(responses)
        check_sse(server.http_port, path, body, responses)
        return StreamTarget(f"{server.url}{path}", body, 0, SSE, responses)

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        anchored = [(label, ANCHOR) for label in labels if ANCHOR in labels and label != ANCHOR]
        floored = [(label, FLOOR) for label in labels if FLOOR in labels and label != FLOOR]
        return anchored + [pair for pair in floored if pair[0] != ANCHOR] + baseline_pairs(labels)

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        lines = []
        for case, rows in summary.items():
            theirs = rows.get(ANCHOR, {}).get("requests_per_s")
            for label, row in rows.items():
                ours = row["requests_per_s"]
                if label.startswith(INFERD) and theirs and ours is not None:
                    met = "met" if ours / theirs >= TARGET_RATIO else "NOT met"
                    lines.append(
                        f"{case}: {label} {ours / theirs:.2f}x {ANCHOR}'s responses/s "
                        f"(target {TARGET_RATIO:g}x: {met})"
                    )
            if FLOOR in rows and theirs:
                ceiling = rows[FLOOR]["requests_per_s"] / theirs
                lines.append(
                    f"{case}: floor/{ANCHOR} {ceiling:.2f}x: the most a grpcio-based server "
                    "could show here"
                )
        return lines


def json_request(responses: int) -> bytes:
    request = {"inputs": [{"name": "n", "shape": [1], "datatype": "INT32", "data": [responses]}]}
    return json.dumps(request).encode()


def grpc_request(responses: int, final_response: bool = False) -> bytes:
    """A serialized ModelInferRequest asking the count model for ``responses``."""
    from inferd.protocol import pb

    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="n", datatype="INT32", shape=[1]).contents.int_contents.append(
        responses
    )
    if final_response:
        request.parameters[FINAL_RESPONSE_PARAMETER].bool_param = True
    serialized: bytes = request.SerializeToString()
    return serialized


def check_sse(port: int, path: str, body: bytes, responses: int) -> None:
    """One stream with the standard library's client: 200, text/event-stream, 0..N-1."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        raw = answer.read()
    finally:
        connection.close()
    kind = answer.getheader("content-type", "")
    if answer.status != 200 or not kind.startswith("text/event-stream"):
        raise VerificationError(f"POST {path}: HTTP {answer.status} {kind}: {raw[:500]!r}")
    try:
        values = [sse_value(event_data(event)) for event in sse_events(raw)]
    except (StreamError, ValueError) as error:
        raise VerificationError(f"POST {path}: {error}") from None
    problem = stream_problem(values, range(responses))
    if problem:
        raise VerificationError(f"POST {path}: {problem}")


def check_grpc(address: str, body: bytes, responses: int, wrapped: bool, final: bool) -> None:
    """One stream with grpcio: status OK, 0..N-1, and the final response if asked."""
    read = grpc_reader(wrapped)
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(STREAM_INFER_PATH)
        try:
            values = [read(message) for message in call(iter((body,)), timeout=30)]
        except grpc.RpcError as error:
            raise VerificationError(f"ModelStreamInfer on {address}: {error}") from None
        except StreamError as error:
            raise VerificationError(f"ModelStreamInfer on {address}: {error}") from None
    finals = values.count(None)
    if final and (finals != 1 or values[-1] is not None):
        raise VerificationError(f"ModelStreamInfer on {address}: {finals} final responses")
    problem = stream_problem([v for v in values if v is not None], range(responses), finals)
    if problem:
        raise VerificationError(f"ModelStreamInfer on {address}: {problem}")
