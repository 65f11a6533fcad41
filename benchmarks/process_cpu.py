"""Where a request's CPU goes, process by process: the protocol processes, the model
host, its workers, for the scale benchmark's ``mlp`` model over REST.

One server at a time (``--protocol-processes``, ``--workers``), loaded by wrk over
JSON, each process's CPU read from /proc over the window and divided by the
requests answered. With ``--baseline-src`` the same layout of another tree runs
too, alternating with this one ``--rounds`` times (a change to the hosted path:
compare the host's line of both). The figures of benchmarks/README.md "Through the
model host" (430 us of decoding, 116 us of host, 60 us of workers) and the host's
write coalescing (x0.92) were read this way.

    python -m benchmarks process-cpu --protocol-processes 2 --workers 2 --rounds 3 \\
        --baseline-src /path/to/other/src
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common.procstat import cpu_seconds, descendants, environment
from benchmarks.common.serverproc import free_ports, server_environment, spawn
from benchmarks.options import add_json_out, command_parser
from benchmarks.results import write_command_record
from inferd.server.roles import Role
from inferd.supervisor.paths import process_role

from .scale.mlp import mlp_row, write_mlp_model

CHECKOUT_SRC = Path(__file__).resolve().parents[1] / "src"


def process_tree(pid: int) -> list[tuple[int, str]]:
    """``pid``'s descendants, oldest first, each with what it is."""
    return [(child, what_process(child)) for child in sorted(descendants(pid))]


FORKED_PROTOCOL = "inferd-proto-"  # a forked protocol process's name (protocol_parent.py)
PROTOCOL_PARENT = "inferd-protopar"  # the parent's, forked from the supervisor
FORKED_HOST = "inferd-host"  # the model host's, forked by the protocol fork parent


def what_process(pid: int) -> str:
    """ "model host", "protocol process 1", "worker 18 of 4055" (its parent)."""
    args = [arg.decode() for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    if "inferd.workers.worker" in args:
        return f"worker {' '.join(args[args.index('inferd.workers.worker') + 1 :]).strip()}"
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    if comm.startswith(FORKED_PROTOCOL):  # forked: its command line is its parent's
        return f"protocol process {comm.removeprefix(FORKED_PROTOCOL)}"
    if comm == FORKED_HOST:  # forked too: its environ is its parent's
        return "model host"
    if "inferd.supervisor.protocol_parent" in args or comm == PROTOCOL_PARENT:
        return "protocol fork parent"
    environ = environment(pid)
    role = process_role(environ)
    if role is not None and role.role is Role.MODEL_HOST:
        return "model host"
    index = environ.get("INFERD_PROTOCOL_INDEX")
    return f"protocol process {index}" if index is not None else " ".join(args)[-60:]


def wrk(url: str, body: Path, seconds: int, connections: int) -> int:
    """Requests wrk had answered in ``seconds`` (non-2xx fail the run)."""
    script = body.with_suffix(".lua")
    script.write_text(
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.body = io.open("{body}"):read("*a")\n'
    )
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk got errors:\n{out}")
    return int(next(line for line in out.splitlines() if "requests in" in line).split()[0])


def measure(src: Path, args: argparse.Namespace, folder: Path) -> tuple[list[str], dict[str, Any]]:
    """One window of the layout served from ``src``: a line per process, and its figures."""
    http, grpc, metrics = free_ports(3)
    settings = {
        "host": "127.0.0.1", "http_port": http, "grpc_port": grpc, "metrics_port": metrics,
        "parallel_workers": args.workers, "protocol_processes": args.protocol_processes,
    }  # fmt: skip
    (folder / "settings.json").write_text(json.dumps(settings))
    env = server_environment({"PYTHONPATH": str(src)})
    command = [args.python, "-m", "inferd", "start", str(folder)]
    server = spawn(command, repository=folder, log_path=folder / "server.log",
                   ports=(http, grpc, metrics), env=env)  # fmt: skip
    with server:
        server.wait_until("/v2/health/ready")
        url = f"{server.url}/v2/models/mlp/infer"
        wrk(url, folder / "body.json", args.warmup, args.connections)
        processes = [(server.process.pid, "inferd start"), *process_tree(server.process.pid)]
        before = {pid: cpu_seconds(pid) for pid, _ in processes}
        answered = wrk(url, folder / "body.json", args.duration, args.connections)
        used = {pid: cpu_seconds(pid) - before[pid] for pid, _ in processes}
        stats = httpx.get(f"{server.url}/v2/models/mlp/stats").json()["model_stats"][0]
    batch = stats["inference_count"] / max(stats["execution_count"], 1)
    rate = answered / args.duration
    per_process = {f"{what} (pid {pid})": 1e6 * used[pid] / answered for pid, what in processes}
    lines = [f"{rate:,.0f} req/s, mean batch {batch:.1f}"]
    lines += [f"  {us:7.1f} us/req  {what}" for what, us in per_process.items()]
    row = {"requests_per_s": rate, "mean_batch": batch, "cpu_us_per_request": per_process}
    return lines, row


def main(argv: Sequence[str]) -> None:
    parser = command_parser("process-cpu", __doc__)
    parser.add_argument("--protocol-processes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="parallel_workers")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=int, default=6, help="measured seconds")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline-src", type=Path, help="another tree's src, alternated")
    parser.add_argument("--python", default=sys.executable, help="runs inferd")
    add_json_out(parser)
    args = parser.parse_args(argv)
    trees = [("this tree", CHECKOUT_SRC)]
    if args.baseline_src is not None:
        trees.insert(0, ("baseline", args.baseline_src.resolve()))
    with tempfile.TemporaryDirectory(prefix="inferd-process-cpu-") as name:
        folder = Path(name)
        write_mlp_model(folder, "mlp", 1.0, 0.02, folder / "device.lock")
        row = list(mlp_row())
        body = {"inputs": [{"name": "x", "shape": [1, len(row)], "datatype": "FP32", "data": row}]}
        (folder / "body.json").write_text(json.dumps(body))
        runs = []
        for round_ in range(args.rounds):
            for label, src in trees:
                lines, figures = measure(src, args, folder)
                print(f"round {round_ + 1}, {label}: {lines[0]}", *lines[1:], sep="\n")
                runs.append({"label": label, "round": round_ + 1, **figures})
                time.sleep(0.5)
    write_command_record(args.json_out, "process-cpu", args, runs)
