"""``python -m benchmarks soak``: many requests, and the server's resources stay flat.

It builds a small model repository in a temporary folder (soakmodels.py: an
sklearn model trained here, a Python echo model that can fail, wait and stream),
starts inferd on free ports with ``--workers`` worker processes, and sends
``--requests`` requests of a mixed kind (soakmix.py: models, sizes, errors,
clients that leave, streams) over REST and gRPC from ``--concurrency`` slots,
checking every answer. Every ``--sample-every`` requests it lets the requests in
flight finish and reads ``/proc/<pid>/status`` (VmRSS, Threads) and
``/proc/<pid>/fd`` of the server and of each worker. At the end it stops the
server with SIGTERM (it must drain and exit 0), prints a table and the growth per
100k requests, and exits non-zero when:

- any answer was wrong, a process exited (a worker replaced after dying too), or
  the server did not exit with 0 on SIGTERM;
- a process's RSS grew by more than ``--max-rss-growth`` KiB per 100k requests
  (least-squares slope over the samples after the warm-up: the first tenth of
  the requests, while caches, arenas and lazily imported code settle). Default
  1024 KiB, i.e. 10 bytes per request: leaking one small object per request (a
  dict entry, a future, a buffer: 100 bytes and more) grows RSS by 10 MiB per
  100k and fails, while the allocator's drift (pymalloc arenas and glibc heaps
  grow and are kept in steps of 256 KiB to a few MiB, whatever the request count)
  stays under it. A short run cannot tell drift from slow growth, so the bound is
  never below ``RSS_FLOOR_KIB`` over the measured span (4 MiB);
- a process's open file descriptors or threads at the end exceed those after
  the warm-up by more than ``--max-fd-growth`` / ``--max-thread-growth``
  (default 2): samples are taken with no request in flight, so both are the
  listening sockets, worker channels, kept-alive connections and the pools'
  threads, a constant; a socket or thread left behind every N requests shows.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.procstat import Usage, children, is_fork_parent, usage
from benchmarks.common.serverproc import ServerProcess, start_server

from .options import add_output_arguments, add_source_arguments, command_parser
from .results import write_command_record
from .servers import resolve_source, use_inferd_source

NAME = "soak"
RSS_FLOOR_KIB = 4096
WARM_UP_SHARE = 0.1
BATCH_TIMEOUT = 600.0  # seconds one batch of requests may take before the soak gives up
PER = 100_000  # growth is reported per this many requests


@dataclass(frozen=True)
class Sample:
    requests: int
    seconds: float
    usage: dict[str, Usage]  # by process label: "server", "worker 0", ...


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(NAME, __doc__)
    add = parser.add_argument
    add("--requests", type=int, default=1_000_000, help="requests to send in all")
    add("--concurrency", type=int, default=16, help="requests in flight at once")
    add("--workers", type=int, default=2, help="parallel_workers of the server")
    add("--sample-every", type=int, help="requests between samples (default: a 40th)")
    add("--max-rss-growth", type=float, default=1024.0, help="KiB per 100k requests")
    add("--max-fd-growth", type=int, default=2, help="file descriptors, end vs warm")
    add("--max-thread-growth", type=int, default=2, help="threads, end vs warm")
    add("--seed", type=int, default=0, help="seeds the request mix")
    add_source_arguments(parser, python=False)
    add_output_arguments(parser, json_out=None)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.requests < 1 or args.concurrency < 1 or args.workers < 0:
        parser.error("--requests and --concurrency must be >= 1, --workers >= 0")
    args.sample_every = args.sample_every or max(1000, args.requests // 40)
    args.inferd_src = resolve_source(args.inferd_src)
    return args


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    use_inferd_source(args.inferd_src)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """The whole soak; the exit status."""
    with tempfile.TemporaryDirectory(prefix="inferd-soak-") as tmp:
        work = args.work_dir or Path(tmp)
        return asyncio.run(_soak(args, work))


async def _soak(args: argparse.Namespace, work: Path) -> int:
    from .soakclient import Load
    from .soakmix import Mix, build_kinds
    from .soakmodels import write_soak_repository

    repo = write_soak_repository(work / "models")
    settings = {"parallel_workers": args.workers, "shutdown_grace_seconds": 10}
    server = start_server(repo, settings=settings, log_dir=work)
    print(f"{NAME}: {args.requests} requests, concurrency {args.concurrency}, "
          f"{args.workers} worker(s); log {server.log_path}", flush=True)  # fmt: skip
    processes = _processes(server)
    mix = Mix(build_kinds(), seed=args.seed)
    load = Load("127.0.0.1", server.http_port, server.grpc_port, args.concurrency)
    samples = [_sample(processes, 0, 0.0)]
    started = time.monotonic()
    try:
        for batch in _batches(args.requests, args.sample_every):
            await asyncio.wait_for(load.run(mix.pick(batch)), BATCH_TIMEOUT)
            done = samples[-1].requests + batch
            samples.append(_sample(processes, done, time.monotonic() - started))
            print(_row(samples[-2], samples[-1]), flush=True)
    except ProcessGone as error:
        print(f"FAILED: {error}; see {server.log_path}", flush=True)
        return 1
    finally:
        await load.close()
        stopped = _stop(server)
    verdict = judge(args, samples, load.tally.problems)
    verdict["server_exit"] = stopped
    if stopped["status"] != 0:
        verdict["ok"] = False
        verdict["failures"].append(f"the server exited with {stopped['status']} on SIGTERM")
    report(samples, verdict, load.tally.examples)
    samples_out = [asdict(sample) for sample in samples]
    write_command_record(args.json_out, "soak", args, [], verdict=verdict, samples=samples_out,
                         sent=dict(load.tally.sent))  # fmt: skip
    return 0 if verdict["ok"] else 1


def _batches(total: int, every: int) -> list[int]:
    return [min(every, total - start) for start in range(0, total, every)]


def _processes(server: ServerProcess) -> dict[str, int]:
    """The server and its children by role: the models' fork parents and the workers
    (forked workers are the server's children too: it adopts them)."""
    labels = {"server": server.process.pid}
    parents = sorted(pid for pid in children(server.process.pid) if is_fork_parent(pid))
    labels.update({f"fork parent {i}": pid for i, pid in enumerate(parents)})
    workers = sorted(set(children(server.process.pid)) - set(parents))
    labels.update({f"worker {i}": pid for i, pid in enumerate(workers)})
    return labels


class ProcessGone(RuntimeError):
    """The server or a worker exited (a worker replaced after dying too)."""


def _sample(processes: dict[str, int], requests: int, seconds: float) -> Sample:
    found = {label: usage(pid) for label, pid in processes.items()}
    gone = [label for label, value in found.items() if value is None]
    if gone:
        raise ProcessGone(f"{', '.join(gone)} exited during the soak")
    return Sample(requests, round(seconds, 3), {k: v for k, v in found.items() if v})


def _stop(server: ServerProcess) -> dict[str, Any]:
    signalled = time.monotonic()
    status = server.stop(timeout=30)
    return {"status": status, "seconds": round(time.monotonic() - signalled, 2)}


def slope_per(points: Sequence[tuple[float, float]], per: float = PER) -> float:
    """Least-squares growth of y per ``per`` of x (0 with fewer than two points)."""
    if len(points) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread * per


def judge(args: argparse.Namespace, samples: Sequence[Sample], problems: int) -> dict[str, Any]:
    """Growth per process after the warm-up, against the bounds."""
    warm = next(s for s in samples if s.requests >= args.requests * WARM_UP_SHARE)
    measured = [s for s in samples if s.requests >= warm.requests]
    span = measured[-1].requests - warm.requests
    rss_bound = max(args.max_rss_growth, RSS_FLOOR_KIB * PER / span if span else math.inf)
    failures = []
    if problems:
        failures.append(f"{problems} wrong answer(s)")
    processes = {label: _growth(label, measured) for label in warm.usage}
    for label, growth in processes.items():
        rss = growth["rss_kib_per_100k"]
        (fds_warm, fds_end), (threads_warm, threads_end) = growth["fds"], growth["threads"]
        if rss > rss_bound:
            failures.append(f"{label}: RSS grew {rss:.0f} KiB per 100k (bound {rss_bound:.0f})")
        if fds_end - fds_warm > args.max_fd_growth:
            failures.append(f"{label}: file descriptors {fds_warm} -> {fds_end}")
        if threads_end - threads_warm > args.max_thread_growth:
            failures.append(f"{label}: threads {threads_warm} -> {threads_end}")
    return {
        "ok": not failures,
        "failures": failures,
        "warm_up_requests": warm.requests,
        "measured_requests": span,
        "rss_bound_kib_per_100k": round(rss_bound, 1),
        "processes": processes,
        "requests_per_s": round(samples[-1].requests / samples[-1].seconds, 1),
    }


def _growth(label: str, measured: Sequence[Sample]) -> dict[str, Any]:
    """One process's figures over the samples after the warm-up."""
    used = [(s.requests, s.usage[label]) for s in measured]
    first, last = used[0][1], used[-1][1]

    def per_100k(field: str) -> float:
        return slope_per([(requests, getattr(value, field)) for requests, value in used])

    return {
        "rss_kib_warm": first.rss_kib,
        "rss_kib_end": last.rss_kib,
        "rss_kib_max": max(value.rss_kib for _, value in used),
        "rss_kib_per_100k": round(per_100k("rss_kib"), 1),
        "fds": (first.fds, last.fds),
        "fds_per_100k": round(per_100k("fds"), 2),
        "threads": (first.threads, last.threads),
        "threads_per_100k": round(per_100k("threads"), 2),
    }


def _row(previous: Sample, sample: Sample) -> str:
    rate = (sample.requests - previous.requests) / max(sample.seconds - previous.seconds, 1e-9)
    cells = [f"{sample.requests:>9}", f"{sample.seconds:>8.1f}s", f"{rate:>7.0f}/s"]
    for label, value in sample.usage.items():
        cells.append(
            f"{label}: {value.rss_kib / 1024:7.1f} MiB {value.fds:4} fds {value.threads:3} thr"
        )
    return "  ".join(cells)


def report(samples: Sequence[Sample], verdict: dict[str, Any], examples: Sequence[str]) -> None:
    print(f"\ngrowth after the warm-up ({verdict['warm_up_requests']} requests), "
          f"over {verdict['measured_requests']} requests, per 100k requests:")  # fmt: skip
    print(f"{'process':<10} {'RSS warm':>10} {'RSS end':>10} {'RSS max':>10} {'RSS/100k':>10} "
          f"{'fds':>9} {'fds/100k':>9} {'threads':>9} {'thr/100k':>9}")  # fmt: skip
    for label, g in verdict["processes"].items():
        fds, threads = g["fds"], g["threads"]
        print(
            f"{label:<10} {g['rss_kib_warm'] / 1024:>6.1f} MiB {g['rss_kib_end'] / 1024:>6.1f} MiB "
            f"{g['rss_kib_max'] / 1024:>6.1f} MiB {g['rss_kib_per_100k']:>6.0f} KiB "
            f"{fds[0]:>4}->{fds[1]:<4} {g['fds_per_100k']:>9.2f} "
            f"{threads[0]:>4}->{threads[1]:<4} {g['threads_per_100k']:>9.2f}"
        )
    print(f"\n{samples[-1].requests} requests in {samples[-1].seconds:.0f}s "
          f"({verdict['requests_per_s']}/s); RSS bound {verdict['rss_bound_kib_per_100k']:.0f} "
          "KiB per 100k")  # fmt: skip
    for example in examples:
        print(f"  wrong answer: {example}")
    for failure in verdict["failures"]:
        print(f"FAILED: {failure}")
    print("OK: flat" if verdict["ok"] else "FAILED", flush=True)
