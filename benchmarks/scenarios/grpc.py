"""gRPC ModelInfer with h2load: inferd vs MLServer, and the floors that bound them."""

from __future__ import annotations

import argparse
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import numpy as np

from benchmarks.common.serverproc import ServerProcess

from ..loadgen import H2load, Load, Target
from ..repository import ROW
from ..servers import ENVOY_FLOOR, FLOOR, INFERD, MLSERVER, Contender
from .base import Case, VerificationError
from .rest import Rest

MODEL_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
INPUT_NAME = "input-0"


class Grpc(Rest):
    name = "grpc"
    description = """gRPC ModelInfer: one FP32 iris row per call with h2load, inferd vs MLServer.

h2load sees HTTP statuses only and a failed gRPC call is still HTTP 200, so each
server's answer is first checked with a real gRPC client (status OK, the right
class), and a measured run counts as clean only if h2load received exactly one
answer of that size per request. The server's CPU per request (all its
processes, and its main thread: the event loop) is the steadier figure when
other work shares the machine.

--reference adds grpc_floor_server.py: grpcio's asyncio server with one handler
that parses the request, calls the same model's predict and answers. No server
on grpcio can beat it with this model, so floor/mlserver is the most any such
server can show against MLServer. --envoy-floor PYVOY adds the same model call
behind Envoy via pyvoy (grpc_floor_asgi.py), to measure what the transport costs."""
    load_tool = "h2load"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_load_arguments(parser, streams=1, encoding="typed")
        parser.add_argument(
            "--reference",
            action="store_true",
            help="also run grpc_floor_server.py (grpcio + the model alone)",
        )
        parser.add_argument(
            "--envoy-floor",
            metavar="PYVOY",
            help="also run grpc_floor_asgi.py under this pyvoy executable",
        )

    def contenders(self) -> list[Contender]:
        contenders = super().contenders()
        if self.options.args.reference:
            contenders.append(Contender(FLOOR, FLOOR))
        if self.options.args.envoy_floor:
            contenders.append(Contender(ENVOY_FLOOR, ENVOY_FLOOR))
        return contenders

    def load(self, connections: int) -> Load:
        return H2load(connections, self.options.args.streams, self.options.threads)

    def describe(self) -> str:
        args = self.options.args
        return f"{super().describe()}, {args.encoding} FP32 input, {args.streams} stream(s)/conn"

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        request = infer_request(self.options.args.encoding)
        with grpc.insecure_channel(server.grpc_address) as channel:
            call = channel.unary_unary(MODEL_INFER_PATH)
            try:
                answer = call(request.SerializeToString(), timeout=30)
            except grpc.RpcError as error:
                raise VerificationError(f"ModelInfer on {server.grpc_address}: {error}") from None
        got = predicted_class_of(answer)
        if got != self.expected_class:
            raise VerificationError(
                f"ModelInfer on {server.grpc_address}: class {got}, not {self.expected_class}"
            )
        url = f"http://{server.grpc_address}{MODEL_INFER_PATH}"
        return Target(url, grpc_frame(request.SerializeToString()), len(grpc_frame(answer)))

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        floors = [(INFERD, FLOOR), (MLSERVER, FLOOR), (FLOOR, MLSERVER), (ENVOY_FLOOR, FLOOR)]
        return super().comparisons(labels) + [p for p in floors if set(p) <= set(labels)]

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        if any(FLOOR in rows and MLSERVER in rows for rows in summary.values()):
            return ["floor/mlserver: the most any grpcio-based server could show against MLServer"]
        return []


def add_load_arguments(
    parser: argparse.ArgumentParser, streams: int, encoding: str, why: str = ""
) -> None:
    """The load's options of the gRPC scenarios: h2load's streams per connection, and how
    the FP32 row is sent (``why``: a note on the default)."""
    parser.add_argument("--streams", type=int, default=streams, help="h2load -m per connection")
    parser.add_argument(
        "--encoding",
        choices=("typed", "raw"),
        default=encoding,
        help=f"the FP32 row in typed contents or raw_input_contents{why}",
    )


def infer_request(encoding: str) -> Any:
    """One iris row as FP32, in typed ``contents`` or in ``raw_input_contents``."""
    from inferd.protocol import pb

    request = pb.ModelInferRequest(model_name="iris")
    tensor = request.inputs.add(name=INPUT_NAME, datatype="FP32", shape=[1, len(ROW)])
    if encoding == "raw":
        request.raw_input_contents.append(np.asarray(ROW, dtype="<f4").tobytes())
    else:
        tensor.contents.fp32_contents.extend(ROW)
    return request


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message: uncompressed flag + 4-byte big-endian length."""
    return struct.pack(">BI", 0, len(message)) + message


def predicted_class_of(answer: bytes) -> int:
    """The one class in a serialized ModelInferResponse (raw or typed contents)."""
    from inferd.protocol import pb

    response = pb.ModelInferResponse.FromString(answer)
    output = response.outputs[0]
    if response.raw_output_contents:
        dtype = "<i8" if output.datatype == "INT64" else "<i4"
        values = np.frombuffer(response.raw_output_contents[0], dtype=dtype)
    else:
        contents = output.contents
        values = np.asarray(list(contents.int64_contents) or list(contents.int_contents))
    if values.size != 1:
        raise VerificationError(f"expected one predicted class, got {response}")
    return int(values[0])
