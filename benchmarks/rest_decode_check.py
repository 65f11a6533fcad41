"""What checking nested JSON data against its shape costs a single-row REST request.

Decodes the same single-row REST bodies with this tree's ``decode_infer_request``
and with the one of an earlier commit (``--before``, default: the commit before
the check), both loaded into this process from git, in alternating rounds so that
both see the same machine. Prints each body's CPU nanoseconds per decode, before
and after (medians over rounds), and the median of the rounds' after/before ratios.

    python -m benchmarks.rest_decode_check [--before REV] [--calls 20000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from inferd.server.rest import codec as codec_rest

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "4b3dc71"  # main before nested data was checked against the shape
ROW = [5.1, 3.5, 1.4, 0.2]


def _input(data: Any) -> dict[str, Any]:
    return {"name": "input-0", "datatype": "FP32", "shape": [1, 4], "data": data}


BODIES = {
    "nested [[4]]": {"inputs": [_input([ROW])]},
    "flat [4]": {"inputs": [_input(ROW)]},
    "nested + 1 output": {"inputs": [_input([ROW])], "outputs": [{"name": "predict"}]},
}


def load_before(revision: str) -> ModuleType:
    """codec_rest of ``revision``, decoding JSON data with that revision's encoding.py."""
    encoding = _module_at(revision, "src/inferd/tensors/encoding.py", "inferd._encoding_before")
    codec = _module_at(revision, "src/inferd/server/rest/codec.py", "inferd._codec_before")
    codec.array_from_json = encoding.array_from_json  # type: ignore[attr-defined]
    return codec


def _module_at(revision: str, path: str, name: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = name.rpartition(".")[0]  # what it imports: this tree's modules
    sys.modules[name] = module
    exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)
    return module


def per_call_ns(decode: Callable[[bytes, None], Any], body: bytes, calls: int) -> float:
    """CPU nanoseconds per call: this thread's CPU time, so that time other processes
    take the core from it is not counted (the machine may be shared)."""
    started = time.thread_time_ns()
    for _ in range(calls):
        decode(body, None)
    return (time.thread_time_ns() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    before = load_before(args.before)
    decoders = {"before": before.decode_infer_request, "after": codec_rest.decode_infer_request}
    print(f"{'body':<20} {'before ns':>10} {'after ns':>10} {'after/before':>13}  (CPU time)")
    for label, request in BODIES.items():
        body = orjson.dumps(request)
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.rounds):  # alternate: both see the same machine load
            for which, decode in decoders.items():
                times[which].append(per_call_ns(decode, body, args.calls))
        ratios = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
        old, new = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"{label:<20} {old:>10.0f} {new:>10.0f} {statistics.median(ratios):>13.3f}")


if __name__ == "__main__":
    main()
