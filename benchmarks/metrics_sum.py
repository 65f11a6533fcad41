"""What one summed /metrics scrape costs the supervisor, with several protocol processes.

Builds one protocol process's registry (observability/metrics.py) serving ``--models``
models, each with counts in every per-model metric, takes its exposition, and
reports the median CPU time over ``--rounds`` of merging ``--processes`` copies of it
(supervisor/metrics.py's ``server_metrics`` and the text it writes, as one scrape
does on the supervisor's event loop), beside reading the same copies with
prometheus_client's parser, the way the merge was first written.

    python -m benchmarks.metrics_sum [--processes 12] [--models 50] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inferd.observability.metrics import Sources, build_registry
from inferd.observability.stats import HttpStats, ModelStatsTable
from inferd.supervisor import exposition
from inferd.supervisor.fanout import Answer
from inferd.supervisor.metrics import Totals, server_metrics


def one_process(models: int) -> bytes:
    """A protocol process's exposition with ``models`` models that served requests."""
    stats, http = ModelStatsTable(), HttpStats()
    now = time.perf_counter_ns()
    for index in range(models):
        model = stats.of(f"model-{index}", "1")
        model.succeeded(now - 2_000_000, now)
        model.executed(rows=1, requests=1)
        model.waited(50_000)
        http.route("POST", "/v2/models/{model_name}/infer").finished(200, 0.002)
    return generate_latest(build_registry(Sources(stats, http=http), "rest_server"))


def cpu_ms(work: Callable[[], None], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.process_time()
        work()
        times.append((time.process_time() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.metrics_sum")
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    body = one_process(args.models)
    answers = [Answer(Path(f"metrics-{i}.sock"), 200, {}, body) for i in range(args.processes)]
    totals = Totals()

    def merge() -> None:
        exposition.write(server_metrics(answers, totals).values(), openmetrics=False)

    def reference_parse() -> None:
        for answer in answers:
            list(text_string_to_metric_families(answer.body.decode()))

    merged, parsed = cpu_ms(merge, args.rounds), cpu_ms(reference_parse, args.rounds)
    lines = len(body.decode().splitlines())
    print(f"{args.processes} processes x {args.models} models ({len(body) / 1024:.0f} KiB, "
          f"{lines} lines each): one summed scrape {merged:.0f} ms of CPU; prometheus_client's "
          f"parser alone on the same {parsed:.0f} ms (medians of {args.rounds})")  # fmt: skip


if __name__ == "__main__":
    main()
