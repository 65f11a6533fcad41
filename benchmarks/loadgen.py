"""The load generators: ``wrk`` for HTTP/1.1 and ``h2load`` for gRPC.

Both are closed-loop: each connection sends its next request when the answer
to the previous one is in, so latencies are at saturation for the connection
count, not at a fixed offered rate. Parsing is kept apart from running so the
parsers are tested without a server.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

WRK_MARKER = "INFERD_WRK_RESULT"
GRPC_HEADERS = ("content-type: application/grpc", "te: trailers")

_WRK_LUA = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
wrk.headers["Content-Type"] = "application/json"

-- No response() callback: it makes wrk parse every body in Lua, which costs
-- enough CPU on a 2-core machine to skew the comparison. wrk counts non-2xx
-- answers itself (summary.errors.status).
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "{marker} requests=%d duration_us=%d bytes=%d non2xx=%d connect=%d read=%d "
      .. "write=%d timeout=%d p50_us=%d p90_us=%d p99_us=%d mean_us=%.1f max_us=%d\\n",
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read,
    e.write, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max))
end
"""
_WRK_LINE = re.compile(rf"^{WRK_MARKER} (.*)$", re.MULTILINE)
_H2_FINISHED = re.compile(r"^finished in ([\d.]+)(ms|s), ([\d.]+) req/s", re.MULTILINE)
_H2_REQUESTS = re.compile(
    r"^requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout",
    re.MULTILINE,
)
_H2_DATA = re.compile(r"^traffic: .*?\((\d+)\) data", re.MULTILINE)


@dataclass(frozen=True)
class Target:
    """Where a load goes and what it sends."""

    url: str
    body: bytes  # a JSON request (wrk) or a length-prefixed gRPC message (h2load)
    answer_size: int = 0  # h2load: bytes of one verified answer frame
    # The server's process group, for loads that watch its memory (keyword-only: the
    # subclasses' fields stay positional).
    server_pid: int | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class LoadResult:
    """What every load generator run reports; subclasses say how errors are counted."""

    unit: ClassVar[str] = "req"  # what ``requests`` counts (a streaming load: responses)
    requests: int
    duration_s: float
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float

    @property
    def errors(self) -> int:
        raise NotImplementedError

    def detail(self) -> str:
        """What a run's line adds for this kind of load."""
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "errors": self.errors, "unit": self.unit}


def latency_figures(latencies_ms: Any, count: int, duration_s: float) -> dict[str, Any]:
    """The figures every load reports from its latencies (ms) and what it counted: the
    LoadResult fields, the same way for every load client."""
    ms = np.asarray(latencies_ms, dtype=float)
    p50, p90, p99 = np.percentile(ms, [50, 90, 99]) if ms.size else (0.0, 0.0, 0.0)
    return {
        "requests": count,
        "duration_s": duration_s,
        "requests_per_s": count / duration_s if duration_s else 0.0,
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "mean_ms": float(ms.mean()) if ms.size else 0.0,
        "max_ms": float(ms.max()) if ms.size else 0.0,
    }


@dataclass(frozen=True)
class WrkResult(LoadResult):
    non2xx: int
    socket_errors: dict[str, int]

    @property
    def errors(self) -> int:
        """Non-2xx responses plus socket errors (connect/read/write/timeout)."""
        return self.non2xx + sum(self.socket_errors.values())


@dataclass(frozen=True)
class H2loadResult(LoadResult):
    failed: int
    grpc_errors: int

    @property
    def errors(self) -> int:
        """Requests h2load saw fail plus answers that were not the verified gRPC answer."""
        return self.failed + self.grpc_errors


class Load(Protocol):
    """Runs one load against a target; ``rate_hint`` (req/s seen in the warm-up) lets a
    generator that needs a request count size its run."""

    @property
    def name(self) -> str: ...

    def run(self, target: Target, seconds: float, rate_hint: float | None) -> LoadResult: ...


# ----------------------------------------------------------------------------- wrk


def wrk_lua_script(body: str) -> str:
    if "]==]" in body:
        raise ValueError("request body may not contain ']==]'")
    return _WRK_LUA.format(body=body, marker=WRK_MARKER)


def parse_wrk_output(stdout: str) -> WrkResult:
    match = _WRK_LINE.search(stdout)
    if match is None:
        raise RuntimeError(f"wrk printed no {WRK_MARKER} line:\n{stdout}")
    raw = {k: float(v) for k, v in (kv.split("=", 1) for kv in match.group(1).split())}
    duration_s = raw["duration_us"] / 1e6
    return WrkResult(
        requests=int(raw["requests"]),
        duration_s=duration_s,
        requests_per_s=raw["requests"] / duration_s if duration_s else 0.0,
        p50_ms=raw["p50_us"] / 1e3,
        p90_ms=raw["p90_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
        mean_ms=raw["mean_us"] / 1e3,
        max_ms=raw["max_us"] / 1e3,
        non2xx=int(raw["non2xx"]),
        socket_errors={k: int(raw[k]) for k in ("connect", "read", "write", "timeout")},
    )


def wrk_command(
    exe: str,
    script: str,
    url: str,
    *,
    connections: int,
    threads: int,
    seconds: float,
    timeout_s: float,
) -> list[str]:
    return [
        exe, f"-t{threads}", f"-c{connections}", f"-d{seconds:.0f}s",
        f"--timeout={timeout_s:g}s", "-s", script, url,
    ]  # fmt: skip


def find_tool(name: str, package: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise RuntimeError(f"{name!r} not found (apt-get install -y {package})")
    return exe


@dataclass(frozen=True)
class Wrk:
    """``wrk`` POSTing one JSON body over ``connections`` HTTP/1.1 connections."""

    connections: int
    threads: int = 1
    timeout_s: float = 10.0
    name: str = "wrk"

    def run(self, target: Target, seconds: float, rate_hint: float | None = None) -> WrkResult:
        exe = find_tool("wrk", "wrk")
        with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
            script.write(wrk_lua_script(target.body.decode()))
            script.flush()
            command = wrk_command(
                exe,
                script.name,
                target.url,
                connections=self.connections,
                threads=self.threads,
                seconds=seconds,
                timeout_s=self.timeout_s,
            )
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=seconds + self.timeout_s + 30
            )
        if done.returncode != 0:
            raise RuntimeError(f"wrk exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return parse_wrk_output(done.stdout)


# -------------------------------------------------------------------------- h2load


def h2load_request_count(seconds: float, rate_hint: float | None) -> int:
    """How many requests make a run of about ``seconds``. With no rate seen yet (the
    warm-up), ~1000 req/s is a floor for any server here: a short run still warms up."""
    if rate_hint is None:
        return max(500, int(1000 * seconds))
    return max(1000, int(rate_hint * seconds))


def parse_h2load(stdout: str, log_text: str, answer_size: int) -> H2loadResult:
    """h2load's summary plus its per-request log (``--log-file``: latency in us, column 3).

    h2load sees HTTP statuses only, and a failed gRPC call is still HTTP 200 with a
    trailers-only answer (no DATA). So a run is clean only if its DATA bytes are
    exactly ``answer_size`` per succeeded request; the shortfall counts as errors."""
    finished = _H2_FINISHED.search(stdout)
    counts = _H2_REQUESTS.search(stdout)
    data = _H2_DATA.search(stdout)
    if not (finished and counts and data):
        raise RuntimeError(f"cannot parse h2load output:\n{stdout}")
    duration_s = float(finished[1]) / (1000 if finished[2] == "ms" else 1)
    total, done, succeeded = int(counts[1]), int(counts[2]), int(counts[3])
    not_ok = int(counts[4]) + int(counts[5]) + int(counts[6]) + (total - done)
    data_bytes = int(data[1])
    good_answers = data_bytes // answer_size if data_bytes % answer_size == 0 else 0
    latencies_ms = [int(line.split("\t")[2]) / 1000 for line in log_text.splitlines()]
    figures = latency_figures(latencies_ms, total, duration_s)
    figures["requests_per_s"] = float(finished[3])  # h2load's own, over its whole run
    return H2loadResult(
        **figures,
        failed=not_ok,
        grpc_errors=max(0, succeeded - good_answers),
    )


@dataclass(frozen=True)
class H2load:
    """``h2load`` sending one gRPC unary call per request. It runs a request count
    (``-n``) rather than a duration so that its byte counts cover every answer."""

    connections: int
    streams: int = 1
    threads: int = 1
    name: str = "h2load"

    def run(self, target: Target, seconds: float, rate_hint: float | None) -> H2loadResult:
        exe = find_tool("h2load", "nghttp2-client")
        requests = h2load_request_count(seconds, rate_hint)
        with tempfile.TemporaryDirectory(prefix="inferd-h2load-") as folder:
            body, log_file = Path(folder) / "request.grpc", Path(folder) / "h2load.log"
            body.write_bytes(target.body)
            command = [
                exe, f"-n{requests}", f"-c{self.connections}", f"-m{self.streams}",
                f"-t{self.threads}", "-d", str(body), "-H", GRPC_HEADERS[0],
                "-H", GRPC_HEADERS[1], f"--log-file={log_file}", target.url,
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"h2load exited {done.returncode}:\n{done.stdout}{done.stderr}")
            log_text = log_file.read_text() if log_file.exists() else ""
        return parse_h2load(done.stdout, log_text, target.answer_size)
