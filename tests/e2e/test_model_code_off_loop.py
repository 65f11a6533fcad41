"""Model code never holds a serving event loop: health probes answer while a plain
generator streams or a slow plain ``predict`` computes, and a plain generator's events
arrive as it yields them. With one and three protocol processes, ``parallel_workers``
0 and 1 (the default: with three protocol processes, default models are copied into
them and run on their event loops' threads, the case this guards).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

from .test_rest_streaming import body, events, index

# The goal is 100 ms (probes here take 10-40 ms); the bound leaves room for a 2-core
# machine under a load of 10 running three protocol processes, and is far below what a
# held loop gives (a whole stream or a whole predict: 1.5 s and 2 s here).
PROBE_BOUND = 0.5
EVENTS = 6
YIELD_GAP_MS = 300
SLOW_PREDICT = 2.0  # seconds, the first call of `slow`


@pytest.fixture(
    scope="module",
    params=[(1, 0), (1, 1), (3, 0), (3, 1)],
    ids=["1-process-pw0", "1-process-pw1", "3-processes-pw0", "3-processes-pw1"],
)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    processes, workers = request.param
    repository = tmp_path_factory.mktemp("off-loop")
    add_custom_model(repository, "plain-tokens", "ThreadTokens")  # threads_per_worker: 1
    add_custom_model(repository, "slow", "SlowEcho", parameters={"extra": {"sleep": SLOW_PREDICT}})
    settings = {"protocol_processes": processes, "parallel_workers": workers}
    with start_server(repository, settings=settings) as process:
        yield process


def probe_while(server: ServerProcess, busy: Callable[[], bool]) -> list[float]:
    """How long each /v2/health/ready took, probed on a new connection each time (so
    that, with several protocol processes, the probes land on every one) while
    ``busy()``."""
    took = []
    while busy():
        started = time.monotonic()
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.get("/v2/health/ready").status_code == 200
        took.append(time.monotonic() - started)
        time.sleep(0.02)
    return took


def in_threads(work: Callable[[int], Any], count: int) -> tuple[list[threading.Thread], list[Any]]:
    results: list[Any] = [None] * count

    def run(number: int) -> None:
        try:
            results[number] = work(number)
        except Exception as error:  # shown by the test's assertion on results
            results[number] = error

    threads = [threading.Thread(target=run, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    return threads, results


def test_a_plain_generator_streams_its_events_spaced_and_probes_answer_meanwhile(
    server: ServerProcess,
) -> None:
    url = f"{server.url}/v2/models/plain-tokens/infer_stream"

    def stream(number: int) -> list[float]:
        request = body(f"s{number}", count=EVENTS, delay_ms=YIELD_GAP_MS)
        with httpx.stream("POST", url, json=request, timeout=60) as sse:  # its own connection
            assert sse.status_code == 200
            got = list(events(sse))
        assert [index(data) for _, data, _ in got] == list(range(EVENTS))
        return [arrived for _, _, arrived in got]

    threads, results = in_threads(stream, 2)
    probes = probe_while(server, lambda: any(thread.is_alive() for thread in threads))
    for thread in threads:
        thread.join()
    for arrivals in results:
        assert isinstance(arrivals, list), arrivals
        gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
        # Spaced as yielded (a loaded machine may delay one event onto the next: the
        # median, not each gap).
        spaced = statistics.median(gaps) > YIELD_GAP_MS / 2000
        assert spaced, f"events came together, not as yielded: {gaps}"
    assert len(probes) > 5 and max(probes) < PROBE_BOUND, f"probes waited: {sorted(probes)}"


def test_a_slow_plain_predict_does_not_hold_the_loop_from_its_first_call(
    server: ServerProcess,
) -> None:
    """Its cost is not known before it is measured: its first calls (one per copy,
    each request on its own connection) run off the loop too."""

    def infer(number: int) -> int:
        tensor = {"name": "x", "datatype": "INT64", "shape": [1], "data": [number]}
        with httpx.Client(base_url=server.url, timeout=60) as client:
            return client.post("/v2/models/slow/infer", json={"inputs": [tensor]}).status_code

    threads, results = in_threads(infer, 3)
    probes = probe_while(server, lambda: any(thread.is_alive() for thread in threads))
    for thread in threads:
        thread.join()
    assert results == [200, 200, 200]
    assert len(probes) > 5 and max(probes) < PROBE_BOUND, f"probes waited: {sorted(probes)}"
