"""A layout's servers: started together on their cores, checked, stopped together.

Each server is a whole ``inferd start`` of its own (its repository, its ports, its
process group), so K of them share nothing but the cores, and the one device a
device-like model takes turns on (a lock file in the layout's folder). Before any
load, every server answers one request per model and protocol, checked (status,
the answer the model's row must get); the bytes of that answer are what each
answer under load must equal.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

from benchmarks.common.serverproc import ServerProcess, free_ports, spawn

from ..loadgen import find_tool
from ..repository import settings_json, write_json
from ..scenarios.base import VerificationError
from ..scenarios.grpc import MODEL_INFER_PATH, grpc_frame
from ..servers import INFERD, Contender, Programs, command_and_env
from .models import ScaleModel
from .options import Layout

_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))
CHECK_TIMEOUT = 30.0
DEVICE_LOCK = "device.lock"  # in the layout's folder: the machine's one device
# A gRPC answer's raw output bytes by datatype: what an answer checked here may hold.
RAW_DTYPES = {"FP32": "<f4", "FP64": "<f8", "INT32": "<i4", "INT64": "<i8"}


@dataclass(frozen=True)
class Endpoint:
    """Where one server answers one model over one protocol, and how it answers."""

    url: str
    request: bytes  # a JSON body, or a length-prefixed gRPC message
    answer: bytes  # the checked answer (JSON body, or gRPC message frame)


@dataclass
class Fleet:
    layout: Layout
    servers: list[ServerProcess]
    startup_s: float  # until the last server was ready

    @property
    def groups(self) -> list[int]:
        """The servers' process groups (each server leads its own)."""
        return [server.process.pid for server in self.servers]

    def endpoints(self, model: ScaleModel, protocol: str) -> list[Endpoint]:
        check = check_rest if protocol == "rest" else check_grpc
        return [check(server, model) for server in self.servers]

    def check_running(self) -> None:
        """RuntimeError when a server has exited: its window's figures would be wrong."""
        for server in self.servers:
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"{server.describe()} exited with {server.process.returncode} under "
                    f"load:\n{server.log()[-2000:]}"
                )

    def stop(self) -> None:
        stop_all(self.servers)


def pinned(command: Sequence[str], cores: Sequence[int] | None) -> list[str]:
    """``command`` run on ``cores`` only (taskset), or as it is."""
    if cores is None:
        return list(command)
    return [find_tool("taskset", "util-linux"), "-c", ",".join(map(str, cores)), *command]


def start_fleet(
    layout: Layout,
    models: Sequence[ScaleModel],
    programs: Programs,
    cores: Sequence[int] | None,
    folder: Path,
    ready_timeout: float,
) -> Fleet:
    """Start every server of ``layout`` at once; wait until all are ready."""
    began = time.monotonic()
    servers: list[ServerProcess] = []
    try:
        for index in range(layout.servers):
            repo = folder / f"server-{index}"
            device = folder / DEVICE_LOCK
            servers.append(start_server(layout, models, programs, cores, repo, device))
        for server in servers:
            server.wait_until(timeout=max(1.0, ready_timeout - (time.monotonic() - began)))
    except BaseException:
        stop_all(servers)
        raise
    return Fleet(layout, servers, time.monotonic() - began)


def start_server(
    layout: Layout,
    models: Sequence[ScaleModel],
    programs: Programs,
    cores: Sequence[int] | None,
    repo: Path,
    device_lock: Path,
) -> ServerProcess:
    ports = free_ports(3)
    write_json(repo / "settings.json", settings_json(ports, layout.settings_json()))
    for model in models:
        model.write(repo, device_lock)
    contender = Contender(INFERD, INFERD)
    command, env = command_and_env(contender, programs, repo, ports[1], layout.protocol_processes)
    return spawn(
        pinned(command, cores), repository=repo, log_path=repo / "server.log", ports=ports,
        env=env, cwd=repo,
    )  # fmt: skip


def stop_all(servers: Sequence[ServerProcess]) -> None:
    """SIGTERM every server at once (each waits for its own drain)."""
    if servers:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.stop(), servers))


def check_rest(server: ServerProcess, model: ScaleModel) -> Endpoint:
    """Two POSTs: 200, the expected answer, the same bytes both times."""
    url = f"{server.url}/v2/models/{model.name}/infer"
    body = model.rest_body()
    first, second = post(url, body), post(url, body)
    data = rest_values(first)
    if data is None or not model.matches(data):
        raise VerificationError(
            f"POST {url}: expected {_shown(model.expected)}, got {first[:500]!r}"
        )
    if first != second:
        raise VerificationError(
            f"POST {url}: two answers differ, so answers under load cannot be checked "
            f"byte for byte: {first!r}, {second!r}"
        )
    return Endpoint(url, body, first)


def post(url: str, body: bytes) -> bytes:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with _LOCAL.open(request, timeout=CHECK_TIMEOUT) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as error:
        raise VerificationError(f"POST {url} -> HTTP {error.code}: {error.read()!r}") from None


def rest_values(answer: bytes) -> list[float] | None:
    """The first output's numbers of a REST answer; None if it holds none."""
    try:
        data = json.loads(answer)["outputs"][0]["data"]
        return [float(value) for value in data]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def check_grpc(server: ServerProcess, model: ScaleModel) -> Endpoint:
    """One ModelInfer through grpcio: status OK and the expected answer."""
    message = model.grpc_message()
    with grpc.insecure_channel(server.grpc_address) as channel:
        call = channel.unary_unary(MODEL_INFER_PATH)
        try:
            answer = call(message, timeout=CHECK_TIMEOUT)
        except grpc.RpcError as error:
            raise VerificationError(f"ModelInfer on {server.grpc_address}: {error}") from None
    got = grpc_values(answer)
    if got is None or not model.matches(got):
        raise VerificationError(
            f"ModelInfer {model.name} on {server.grpc_address}: "
            f"{'no numbers' if got is None else _shown(got)}, not {_shown(model.expected)}"
        )
    url = f"http://{server.grpc_address}{MODEL_INFER_PATH}"
    return Endpoint(url, grpc_frame(message), grpc_frame(answer))


def grpc_values(answer: bytes) -> list[float] | None:
    """The first output's numbers of a serialized ModelInferResponse (raw or typed
    contents); None if it holds none of the datatypes checked here."""
    from inferd.protocol import pb

    response = pb.ModelInferResponse.FromString(answer)
    if not response.outputs:
        return None
    output = response.outputs[0]
    if response.raw_output_contents:
        dtype = RAW_DTYPES.get(output.datatype)
        raw = response.raw_output_contents[0]
        return None if dtype is None else np.frombuffer(raw, dtype=dtype).tolist()
    contents = output.contents
    typed = (contents.fp32_contents, contents.fp64_contents, contents.int64_contents,
             contents.int_contents)  # fmt: skip
    return next(([float(value) for value in values] for values in typed if values), None)


def _shown(values: Sequence[float]) -> str:
    """A few of an answer's numbers, for a message."""
    head = ", ".join(f"{value:g}" for value in values[:4])
    return f"[{head}{', ...' if len(values) > 4 else ''}] ({len(values)} numbers)"
