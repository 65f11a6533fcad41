"""The load of one window: a generator per server, all at once, each answer checked.

REST runs ``wrk`` with a Lua ``response()`` that counts every answer that is not
status 200 with exactly the checked answer's bytes (it costs wrk a little CPU per
answer, the same for every layout). gRPC runs ``h2load`` for a duration; it sees
HTTP statuses only, so an answer counts as right when its DATA bytes are those of
the checked answer (a failed call is a trailers-only answer without DATA). Each
generator gets an even share of the layout's connections and threads, and is
pinned to the load cores when they are apart from the servers'.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..loadgen import (
    GRPC_HEADERS,
    WRK_MARKER,
    LoadResult,
    find_tool,
    parse_h2load,
    parse_wrk_output,
    wrk_command,
)
from .fleet import Endpoint, pinned

WRK_TIMEOUT_S = 10.0
_WRONG = re.compile(rf"^{WRK_MARKER} .*\bwrong=(\d+)", re.MULTILINE)
_CHECKED_WRK_LUA = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
wrk.headers["Content-Type"] = "application/json"

local expected = [==[{answer}]==]
local threads = {{}}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  wrong = 0
end

function response(status, headers, body)
  if status ~= 200 or body ~= expected then
    wrong = wrong + 1
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  local w = 0
  for _, thread in ipairs(threads) do
    w = w + thread:get("wrong")
  end
  io.write(string.format(
    "{marker} requests=%d duration_us=%d bytes=%d non2xx=%d connect=%d read=%d "
      .. "write=%d timeout=%d p50_us=%d p90_us=%d p99_us=%d mean_us=%.1f max_us=%d wrong=%d\\n",
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read,
    e.write, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max, w))
end
"""


@dataclass(frozen=True)
class Share:
    """One generator's part of a layout's load."""

    connections: int
    threads: int


@dataclass(frozen=True)
class Outcome:
    """What one generator measured against one server."""

    result: LoadResult
    wrong: int  # answers that were not the checked one (included in ``errors``)

    @property
    def errors(self) -> int:
        return self.result.errors + self.wrong


def split_load(servers: int, connections: int, threads: int) -> Share:
    """Each server's share: the connections split evenly (rounded up), the threads too
    (at least one each, never more than its connections)."""
    per_server = math.ceil(connections / servers)
    return Share(per_server, min(per_server, max(1, threads // servers)))


def checked_wrk_script(body: bytes, answer: bytes) -> str:
    for text in (body, answer):
        if b"]==]" in text:
            raise ValueError("a request or answer may not contain ']==]'")
    return _CHECKED_WRK_LUA.format(body=body.decode(), answer=answer.decode(), marker=WRK_MARKER)


def parse_checked_wrk(stdout: str) -> Outcome:
    wrong = _WRONG.search(stdout)
    if wrong is None:
        raise RuntimeError(f"wrk printed no {WRK_MARKER} line with wrong=:\n{stdout}")
    return Outcome(parse_wrk_output(stdout), int(wrong[1]))


def run_wrk(endpoint: Endpoint, share: Share, seconds: int, cores: Sequence[int] | None) -> Outcome:
    exe = find_tool("wrk", "wrk")
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(checked_wrk_script(endpoint.request, endpoint.answer))
        script.flush()
        command = wrk_command(
            exe, script.name, endpoint.url, connections=share.connections,
            threads=share.threads, seconds=seconds, timeout_s=WRK_TIMEOUT_S,
        )  # fmt: skip
        done = _run(pinned(command, cores), seconds)
    return parse_checked_wrk(done.stdout)


def h2load_command(
    exe: str, endpoint_url: str, body: Path, log: Path, share: Share, seconds: int
) -> list[str]:
    return [
        exe, f"-D{seconds}", f"-c{share.connections}", "-m1", f"-t{share.threads}",
        "-d", str(body), "-H", GRPC_HEADERS[0], "-H", GRPC_HEADERS[1],
        f"--log-file={log}", endpoint_url,
    ]  # fmt: skip


def run_h2load(
    endpoint: Endpoint, share: Share, seconds: int, cores: Sequence[int] | None
) -> Outcome:
    exe = find_tool("h2load", "nghttp2-client")
    with tempfile.TemporaryDirectory(prefix="inferd-scale-h2load-") as folder:
        body, log = Path(folder) / "request.grpc", Path(folder) / "h2load.log"
        body.write_bytes(endpoint.request)
        command = h2load_command(exe, endpoint.url, body, log, share, seconds)
        done = _run(pinned(command, cores), seconds)
        log_text = log.read_text() if log.exists() else ""
    return Outcome(parse_h2load(done.stdout, log_text, len(endpoint.answer)), 0)


def _run(command: list[str], seconds: int) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + WRK_TIMEOUT_S + 30
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done


def drive(
    endpoints: Sequence[Endpoint],
    protocol: str,
    share: Share,
    seconds: int,
    cores: Sequence[int] | None,
) -> list[Outcome]:
    """One generator per endpoint, all running together; their outcomes in order."""
    run = run_wrk if protocol == "rest" else run_h2load
    with ThreadPoolExecutor(len(endpoints)) as pool:
        futures = [pool.submit(run, endpoint, share, seconds, cores) for endpoint in endpoints]
        return [future.result() for future in futures]
