"""gRPC (Open Inference Protocol ModelInfer) throughput+latency: inferd vs MLServer.

Both servers get the same model repository (``common.write_model_repo``: the
iris LogisticRegression under ``mlserver_sklearn.SKLearnModel``) and the same
``h2load`` load: one FP32 row per ``ModelInfer`` call, sent as gRPC framing
(``content-type: application/grpc``, ``te: trailers``, a body of a 5-byte
prefix + serialized ``ModelInferRequest``). Rounds alternate the server order.

h2load sees HTTP statuses only, and a failed gRPC call is still HTTP 200 (the
error is in the ``grpc-status`` trailer, with no message). So each server's
answer is first checked with a real gRPC client (status OK, the right class),
and every answer of a measured run is then accounted for: a run counts as
clean only if h2load received exactly one answer message of that verified
size per request (DATA bytes == requests x answer size); anything else is
reported as errors.

Besides requests/s and latency it reports each server's CPU time (all its
processes and threads) per request over the measured run, the steadier figure
when other work shares the machine.

Run from the repository root::

    /work/main/.venv/bin/python benchmarks/bench_grpc.py --duration 10 --connections 16
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import numpy as np
from bench_rest import (
    MODEL_NAME,
    ROW,
    RunRecord,
    command_factories,
    expected_prediction,
    prepare_repo,
    print_summary,
    ratios,
    server_order,
    summarize,
)
from common import (
    MODEL_FILE,
    LoadResult,
    ServerError,
    ServerPorts,
    ServerProcess,
    exit_status,
)

from inferd.protocol import pb, pb_grpc

MODEL_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
REFERENCE = "floor"
ENVOY_FLOOR = "envoy-floor"
BENCHMARKS_DIR = Path(__file__).resolve().parent
REFERENCE_SERVER = BENCHMARKS_DIR / "grpc_floor_server.py"
GRPC_HEADERS = ("content-type: application/grpc", "te: trailers")
INPUT_NAME = "input-0"


# ---------------------------------------------------------------- the request


def infer_request(encoding: str) -> pb.ModelInferRequest:
    """One iris row as FP32, in typed ``contents`` or in ``raw_input_contents``."""
    request = pb.ModelInferRequest(model_name=MODEL_NAME)
    tensor = request.inputs.add(name=INPUT_NAME, datatype="FP32", shape=[1, len(ROW)])
    if encoding == "raw":
        request.raw_input_contents.append(np.asarray(ROW, dtype="<f4").tobytes())
    else:
        tensor.contents.fp32_contents.extend(ROW)
    return request


def grpc_frame(message: bytes) -> bytes:
    """gRPC length-prefixed message: uncompressed flag + 4-byte big-endian length."""
    return struct.pack(">BI", 0, len(message)) + message


def predicted_class(response: pb.ModelInferResponse) -> int:
    output = response.outputs[0]
    if response.raw_output_contents:
        dtype = "<i8" if output.datatype == "INT64" else "<i4"
        values = np.frombuffer(response.raw_output_contents[0], dtype=dtype)
    else:
        contents = output.contents
        values = np.asarray(list(contents.int64_contents) or list(contents.int_contents))
    if values.size != 1:
        raise ServerError(f"expected one predicted class, got {response}")
    return int(values[0])


def verify_answer(address: str, request: pb.ModelInferRequest, expected: int) -> int:
    """One real gRPC call: status OK and the right class. Returns the answer's frame size."""
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            response = stub.ModelInfer(request, timeout=30)
        except grpc.RpcError as error:
            raise ServerError(f"verification ModelInfer on {address}: {error}") from None
    got = predicted_class(response)
    if got != expected:
        raise ServerError(f"verification ModelInfer on {address}: class {got}, not {expected}")
    return len(grpc_frame(response.SerializeToString()))


# --------------------------------------------------------------------- h2load

_FINISHED = re.compile(r"^finished in ([\d.]+)(ms|s), ([\d.]+) req/s", re.MULTILINE)
_REQUESTS = re.compile(
    r"^requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout",
    re.MULTILINE,
)
_DATA = re.compile(r"^traffic: .*?\((\d+)\) data", re.MULTILINE)


@dataclass(frozen=True)
class H2loadResult(LoadResult):
    """One h2load run."""

    failed: int
    grpc_errors: int
    # Server CPU (all its processes and threads) per request: steadier than req/s
    # on a machine shared with other work. None where /proc is not available.
    cpu_us_per_request: float | None = None
    # CPU of the server's main thread (its event loop) per request: the bound on
    # req/s when spare cores take the other threads and the load generator.
    main_thread_us_per_request: float | None = None

    @property
    def errors(self) -> int:
        """Requests h2load saw fail plus answers that were not the verified gRPC answer."""
        return self.failed + self.grpc_errors


def run_h2load(
    url: str,
    body: Path,
    *,
    requests: int,
    connections: int,
    streams: int,
    threads: int,
    answer_size: int,
    log_file: Path,
) -> H2loadResult:
    exe = shutil.which("h2load")
    if exe is None:
        raise RuntimeError("h2load not found (apt-get install -y nghttp2-client)")
    log_file.unlink(missing_ok=True)  # h2load appends
    command = [
        exe, f"-n{requests}", f"-c{connections}", f"-m{streams}", f"-t{threads}",
        "-d", str(body), "-H", GRPC_HEADERS[0], "-H", GRPC_HEADERS[1],
        f"--log-file={log_file}", url,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"h2load exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return parse_h2load(done.stdout, log_file, answer_size)


def parse_h2load(stdout: str, log_file: Path, answer_size: int) -> H2loadResult:
    finished, counts, data = (
        _FINISHED.search(stdout),
        _REQUESTS.search(stdout),
        _DATA.search(stdout),
    )
    if not (finished and counts and data):
        raise RuntimeError(f"cannot parse h2load output:\n{stdout}")
    duration_s = float(finished[1]) / (1000 if finished[2] == "ms" else 1)
    total, done, succeeded = int(counts[1]), int(counts[2]), int(counts[3])
    not_ok = int(counts[4]) + int(counts[5]) + int(counts[6]) + (int(counts[1]) - done)
    # A gRPC error is trailers-only (no DATA); a different answer has a different size.
    data_bytes = int(data[1])
    good_answers = data_bytes // answer_size if data_bytes % answer_size == 0 else 0
    latencies_ms = np.array(
        [int(line.split("\t")[2]) / 1000 for line in log_file.read_text().splitlines()]
    )
    p50, p90, p99 = np.percentile(latencies_ms, [50, 90, 99]) if latencies_ms.size else (0, 0, 0)
    return H2loadResult(
        requests=total,
        duration_s=duration_s,
        requests_per_s=float(finished[3]),
        p50_ms=float(p50),
        p90_ms=float(p90),
        p99_ms=float(p99),
        mean_ms=float(latencies_ms.mean()) if latencies_ms.size else 0.0,
        max_ms=float(latencies_ms.max()) if latencies_ms.size else 0.0,
        failed=not_ok,
        grpc_errors=max(0, succeeded - good_answers),
    )


def group_cpu_seconds(server: ServerProcess) -> float | None:
    """User+system CPU seconds of every live process in the server's process group."""
    if server.proc is None or not Path("/proc").is_dir():
        return None
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        if int(fields[2]) == server.proc.pid:  # fields[2] is the process group id
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def main_thread_cpu_seconds(server: ServerProcess) -> float | None:
    """User+system CPU seconds of the server process's main thread."""
    if server.proc is None:
        return None
    pid = server.proc.pid
    try:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def print_cpu_summary(records: list[RunRecord]) -> None:
    for label, field in (
        ("server CPU", "cpu_us_per_request"),
        ("main-thread CPU", "main_thread_us_per_request"),
    ):
        medians = {}
        for name in ("inferd", "mlserver"):
            values = [getattr(r.result, field) for r in records if r.server == name]
            if values and None not in values:
                medians[name] = float(np.median(values))
                print(f"{name:<9}{label} per request (median): {medians[name]:7.0f} us")
        if len(medians) == 2:
            ratio = medians["mlserver"] / medians["inferd"]
            print(f"{label} per request mlserver/inferd: x{ratio:.2f}")


# ---------------------------------------------------------------------- runs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=10.0, help="target seconds per run")
    p.add_argument("--warmup", type=float, default=3.0, help="warm-up seconds (discarded)")
    p.add_argument("--connections", type=int, default=16, help="h2load -c")
    p.add_argument("--streams", type=int, default=1, help="h2load -m: streams per connection")
    p.add_argument("--threads", type=int, default=1, help="h2load -t")
    p.add_argument("--rounds", type=int, default=2, help="order alternates between rounds")
    p.add_argument("--encoding", choices=("typed", "raw"), default="typed",
                   help="FP32 row in typed contents or in raw_input_contents")  # fmt: skip
    p.add_argument("--ready-timeout", type=float, default=120.0, help="server start deadline s")
    p.add_argument("--inferd-python", default="/work/main/.venv/bin/python")
    p.add_argument("--mlserver-bin", default="/work/mlserver-venv/bin/mlserver")
    p.add_argument("--only", choices=("inferd", "mlserver", "both"), default="both")
    p.add_argument("--parallel-workers", type=int, default=0)
    p.add_argument("--reference", action="store_true",
                   help="also run grpc_floor_server.py (grpcio + the model alone)")  # fmt: skip
    p.add_argument("--envoy-floor", metavar="PYVOY",
                   help="also run grpc_floor_asgi.py under this pyvoy executable")  # fmt: skip
    p.add_argument("--extra-settings", type=json.loads, default={},
                   help="JSON merged into settings.json, e.g. '{\"debug\": false}'")  # fmt: skip
    p.add_argument("--work-dir", type=Path, help="keep repos/logs here (default: temp dir)")
    p.add_argument("--json-out", type=Path, help="write all results as JSON")
    args = p.parse_args(argv)
    if not isinstance(args.extra_settings, dict):
        p.error("--extra-settings must be a JSON object")
    return args


def bench_one(name: str, args: argparse.Namespace, work: Path, round_index: int) -> RunRecord:
    ports, repo = prepare_repo(name, args, work, round_index)
    request = infer_request(args.encoding)
    body = repo / "request.grpc"
    body.write_bytes(grpc_frame(request.SerializeToString()))
    address = f"127.0.0.1:{ports.grpc}"
    url = f"http://{address}{MODEL_INFER_PATH}"
    server = server_process(name, args, repo, ports)
    # The Envoy floor answers the readiness poll on its one port, the gRPC one.
    ready_port = ports.grpc if name == ENVOY_FLOOR else ports.http
    load = {"connections": args.connections, "streams": args.streams, "threads": args.threads}
    try:
        server.start()
        startup = server.wait_ready(f"http://127.0.0.1:{ready_port}", args.ready_timeout)
        expected = expected_prediction(repo / MODEL_NAME / MODEL_FILE)
        answer_size = verify_answer(address, request, expected)
        log_file = repo / "h2load.log"
        # The warm-up also measures the rate, which sizes the measured run (-n keeps
        # h2load's byte counts exact, so every answer is accounted for).
        warm = run_h2load(url, body, requests=warmup_requests(args), answer_size=answer_size,
                          log_file=log_file, **load)  # fmt: skip
        report_errors(f"{name} warm-up", warm)
        count = max(1000, int(warm.requests_per_s * args.duration))
        cpu_before = group_cpu_seconds(server), main_thread_cpu_seconds(server)
        result = run_h2load(url, body, requests=count, answer_size=answer_size,
                            log_file=log_file, **load)  # fmt: skip
        cpu_after = group_cpu_seconds(server), main_thread_cpu_seconds(server)
        result = with_cpu(result, cpu_before, cpu_after)
    finally:
        server.stop()
    print(f"  {name:<8} round {round_index}: {format_row(result)}  (ready in {startup:.1f}s)")
    report_errors(name, result)
    return RunRecord(name, round_index, startup, result)  # duck-types WrkResult


def with_cpu(
    result: H2loadResult,
    before: tuple[float | None, float | None],
    after: tuple[float | None, float | None],
) -> H2loadResult:
    """``result`` with the CPU spent between ``before`` and ``after`` per request."""
    per_request = [
        (end - start) / result.requests * 1e6 if start is not None and end is not None else None
        for start, end in zip(before, after, strict=True)
    ]
    return replace(
        result, cpu_us_per_request=per_request[0], main_thread_us_per_request=per_request[1]
    )


def warmup_requests(args: argparse.Namespace) -> int:
    # ~1000 req/s is a floor for either server here; a short warm-up still warms up.
    return max(500, int(1000 * args.warmup))


def report_errors(label: str, result: H2loadResult) -> None:
    if result.errors:
        print(
            f"  WARNING {label}: {result.failed} requests failed in h2load, "
            f"{result.grpc_errors} answers were not the verified gRPC answer",
            file=sys.stderr,
        )


def format_row(r: H2loadResult) -> str:
    cpu = f"  cpu {r.cpu_us_per_request:5.0f} us/req" if r.cpu_us_per_request else ""
    if r.main_thread_us_per_request:
        cpu += f" (main thread {r.main_thread_us_per_request:4.0f})"
    return (
        f"{r.requests_per_s:9.1f} req/s  p50 {r.p50_ms:7.2f} ms  "
        f"p99 {r.p99_ms:7.2f} ms  errors {r.errors}{cpu}  ({r.requests} requests)"
    )


def round_order(args: argparse.Namespace, round_index: int) -> list[str]:
    """The servers of one round; with ``--reference`` the floor server too."""
    names = server_order(args.only, 0) + ([REFERENCE] if args.reference else [])
    names += [ENVOY_FLOOR] if args.envoy_floor else []
    return names if round_index % 2 == 0 else names[::-1]


def server_process(
    name: str, args: argparse.Namespace, repo: Path, ports: ServerPorts
) -> ServerProcess:
    log_path = repo / "server.log"
    if name == REFERENCE:
        command = [args.inferd_python, str(REFERENCE_SERVER), str(repo)]
        return ServerProcess(command, cwd=repo, log_path=log_path)
    if name == ENVOY_FLOOR:
        command = [args.envoy_floor, "--address", "127.0.0.1", "--port", str(ports.grpc),
                   "grpc_floor_asgi:app"]  # fmt: skip
        path = os.pathsep.join([str(BENCHMARKS_DIR), str(BENCHMARKS_DIR.parent / "src")])
        env = {**os.environ, "PYTHONPATH": path, "INFERD_FLOOR_REPO": str(repo)}
        return ServerProcess(command, cwd=repo, log_path=log_path, env=env)
    return ServerProcess(command_factories(args)[name](repo), cwd=repo, log_path=log_path)


def print_reference_summary(summary: dict[str, dict[str, float]]) -> None:
    """Where the floor ran: how close inferd comes to it, and the ceiling it sets."""
    floor = summary.get(REFERENCE)
    if floor is None:
        return
    for name in ("inferd", "mlserver"):
        if name in summary:
            share = summary[name]["requests_per_s"] / floor["requests_per_s"]
            print(f"{name}/floor: req/s x{share:.2f}")
    if "mlserver" in summary:
        ceiling = floor["requests_per_s"] / summary["mlserver"]["requests_per_s"]
        print(f"floor/mlserver: req/s x{ceiling:.2f} (the most any grpcio server could show)")
    if ENVOY_FLOOR in summary:
        gain = summary[ENVOY_FLOOR]["requests_per_s"] / floor["requests_per_s"]
        print(f"{ENVOY_FLOOR}/floor: req/s x{gain:.2f} (the same model call behind Envoy)")


def run_all(args: argparse.Namespace, work: Path) -> tuple[list[RunRecord], list[str]]:
    records: list[RunRecord] = []
    failures: list[str] = []
    for round_index in range(args.rounds):
        for name in round_order(args, round_index):
            try:
                records.append(bench_one(name, args, work, round_index))
            except (ServerError, RuntimeError) as exc:
                print(f"  {name:<8} round {round_index}: FAILED: {exc}", file=sys.stderr)
                failures.append(f"{name} round {round_index}: {exc}")
    return records, failures


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(
        f"gRPC ModelInfer benchmark: {args.only}, {args.rounds} round(s), h2load "
        f"-c{args.connections} -m{args.streams} -t{args.threads}, ~{args.duration:g}s per run "
        f"(+{args.warmup:g}s warm-up), {args.encoding} FP32 input, "
        f"parallel_workers={args.parallel_workers}, extra settings={args.extra_settings}\n"
        "NOTE: server and h2load share all CPUs; nothing pinned."
    )
    with tempfile.TemporaryDirectory(prefix="inferd-bench-grpc-") as tmp:
        records, failures = run_all(args, args.work_dir or Path(tmp))
    summary = summarize(records, round_order(args, 0))
    ratio = ratios(summary)
    print_summary(summary, ratio)
    print_reference_summary(summary)
    print_cpu_summary(records)
    if args.json_out:
        out = {
            "setup": {**vars(args), "work_dir": str(args.work_dir), "json_out": str(args.json_out)},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "runs": [r.to_dict() for r in records],
            "failures": failures,
            "summary": summary,
            "ratio_inferd_over_mlserver": ratio,
            "medians_note": "medians over rounds; errors summed",
        }
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return exit_status(sum(r.result.errors for r in records), len(failures))


if __name__ == "__main__":
    sys.exit(main())
