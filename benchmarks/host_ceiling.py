"""How many requests the model host can take: its ceiling, whatever the protocol processes.

With ``protocol_processes`` N > 1 a batched or GPU model runs once, in the model host
(docs/design.md "The model host"), and every protocol process sends it their
requests already decoded. The protocol work spreads over N processes; the host's
does not: its CPU per request bounds what one ``inferd start`` can serve of such a
model, however many cores decode. This measures that bound on any machine, even
one with too few cores to run enough protocol processes to reach it: a real server
(``protocol_processes: 2``, so a host runs) serves the scale benchmark's ``mlp``
model (``scale/mlp.py``: 2048 FP32 a row, batches of 32 within 2 ms, the device
slept under a lock), and ``--clients`` processes send pre-packed requests straight
to the host's socket, as protocol processes would, many in flight each, checking
every answer. The host's own CPU over the window (its workers apart) gives its CPU
per request and ``1e6 / that``, the requests per second one core of host can take.

    python -m benchmarks host-ceiling --duration 5 --clients 1 --in-flight 64
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.procstat import children, cpu_seconds, is_model_host, unix_socket_paths
from benchmarks.common.serverproc import start_server
from benchmarks.options import add_json_out, command_parser
from benchmarks.results import write_command_record
from inferd.types import InferenceRequest, Tensor
from inferd.workers import ipc, messages
from inferd.workers.channel import Channel

from .scale.mlp import mlp_answer, mlp_row, write_mlp_model

INSTANCE = 1  # the instance id this client binds the model to on its connection
BOUND = "bound"  # what a client says once its connection is bound to the model


def host_of(supervisor: int) -> tuple[int, Path]:
    """The model host's pid and its socket (the one it listens on: forked, its
    /proc/PID/environ is its parent's)."""
    for pid in children(supervisor):
        if is_model_host(pid):
            sockets = [Path(p) for p in unix_socket_paths(pid) if p.endswith("/host.sock")]
            if sockets:
                return pid, sockets[0]
    raise RuntimeError("no model host runs (its model should have needed one)")


def client(path: str, in_flight: int, times: Any, out: Any) -> None:
    """One protocol process's stand-in: ``in_flight`` calls at a time to the host,
    counting the answers that come back right between the start and stop it is sent
    once every client is bound (a spawned client's start-up is slow on a loaded box)."""
    out.put(asyncio.run(_client(Path(path), in_flight, times, out)))


async def _client(path: Path, in_flight: int, times: Any, out: Any) -> tuple[int, int]:
    row = mlp_row()
    expected = np.asarray(mlp_answer(row), dtype=np.float32)
    data = np.asarray([row], dtype=np.float32)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    channel = await Channel.open(sock, lambda: "the host is gone", lambda: None)
    await channel.call(messages.BindHosted("mlp", None), INSTANCE)
    out.put(BOUND)
    start, stop = times.get(timeout=120)
    counted, wrong = 0, 0

    async def calls() -> None:
        nonlocal counted, wrong
        while (now := time.time()) < stop:
            packed = ipc.pack_request(InferenceRequest([Tensor("x", data)]))
            future = channel.start_call(messages.Predict(packed), INSTANCE, ipc.unpack_response)
            response = await future
            if start <= now and time.time() < stop:
                counted += 1
                wrong += not np.array_equal(response.outputs[0].data[0], expected)

    await asyncio.gather(*(calls() for _ in range(in_flight)))
    channel.close()
    return counted, wrong


def measure(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    write_mlp_model(folder, "mlp", args.call_ms, args.row_ms, folder / "device.lock")
    settings = {"protocol_processes": 2, "parallel_workers": args.workers}
    with start_server(folder, settings) as server:
        host, path = host_of(server.process.pid)
        spawn = multiprocessing.get_context("spawn")
        results: Any = spawn.Queue()
        times: Any = spawn.Queue()
        clients = [
            spawn.Process(target=client, args=(str(path), args.in_flight, times, results))
            for _ in range(args.clients)
        ]
        for process in clients:
            process.start()
        for _ in clients:
            assert results.get(timeout=120) == BOUND
        begin = time.time() + args.warmup
        end = begin + args.duration
        for _ in clients:
            times.put((begin, end))
        time.sleep(max(begin - time.time(), 0))
        used = cpu_seconds(host)
        time.sleep(max(end - time.time(), 0))
        used = cpu_seconds(host) - used
        answers = [results.get(timeout=60) for _ in clients]
        for process in clients:
            process.join()
    counted = sum(count for count, _ in answers)
    wrong = sum(bad for _, bad in answers)
    per_request = 1e6 * used / max(counted, 1)
    return {
        "req_per_s": counted / args.duration,
        "wrong": wrong,
        "host_share": used / args.duration,
        "host_us_per_request": per_request,
        "host_ceiling_req_per_s": 1e6 / per_request,
    }


def main(argv: Sequence[str]) -> None:
    parser = command_parser("host-ceiling", __doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before it")
    parser.add_argument("--clients", type=int, default=1, help="client processes")
    parser.add_argument("--in-flight", type=int, default=64, help="calls at once per client")
    parser.add_argument("--workers", type=int, default=2, help="the host's parallel_workers")
    parser.add_argument("--call-ms", type=float, default=1.0, help="device time per call")
    parser.add_argument("--row-ms", type=float, default=0.02, help="device time per row")
    add_json_out(parser)
    args = parser.parse_args(argv)
    if min(args.duration, args.clients, args.in_flight, args.workers) <= 0:
        parser.error("--duration, --clients, --in-flight and --workers must be positive")
    with tempfile.TemporaryDirectory(prefix="inferd-host-ceiling-") as folder:
        figures = measure(args, Path(folder))
    print(
        f"model host: {figures['req_per_s']:,.0f} req/s from {args.clients} client(s) x "
        f"{args.in_flight} in flight; wrong answers {figures['wrong']:.0f}; host process "
        f"{figures['host_share']:.0%} of a core, {figures['host_us_per_request']:.0f} us "
        f"per request: one core of host takes {figures['host_ceiling_req_per_s']:,.0f} req/s"
    )
    run = {"label": "model host", "requests_per_s": figures["req_per_s"], **figures}
    write_command_record(args.json_out, "host-ceiling", args, [run])
