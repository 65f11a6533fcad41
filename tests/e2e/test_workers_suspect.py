"""A request that kills its worker is the suspect and is not retried: sent again it
would kill the model's other worker too, and every request running there.

`fragile` runs in two worker processes (one request at a time each); a negative
input makes its predict call ``os._exit`` (the good requests send none). With one
protocol process, and with three (the model, which sets ``workers``, runs in the
model host's worker processes).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import is_running
from tests.support.serverproc import ServerProcess

from .test_workers_faults import echo_body, echoed

CLIENTS = 6


class GoodClient(threading.Thread):
    """Sends good requests on its own connection until told to stop; keeps every outcome."""

    def __init__(self, server: ServerProcess, number: int, stop: threading.Event) -> None:
        super().__init__(name=f"client-{number}")
        self.server, self.number, self.stop = server, number, stop
        self.outcomes: list[tuple[list[int], httpx.Response | Exception]] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=30) as client:
            sequence = 0
            while not self.stop.is_set():
                sent = [self.number, sequence]
                try:
                    answer: Any = client.post("/v2/models/fragile/infer", json=echo_body(sent))
                except httpx.HTTPError as error:
                    answer = error
                self.outcomes.append((sent, answer))
                sequence += 1


@pytest.mark.parametrize("processes", [1, 3], ids=["1-process", "3-processes"])
def test_a_request_that_kills_its_worker_is_answered_503_once_and_the_other_worker_lives(
    tmp_path: Path, start: Callable[..., ServerProcess], processes: int
) -> None:
    add_custom_model(
        tmp_path, "fragile", "ExitsOnNegative", workers=2, parameters={"extra": {"sleep": 0.01}}
    )
    server = start(tmp_path, settings={"parallel_workers": 2, "protocol_processes": processes})
    stop = threading.Event()
    clients = [GoodClient(server, number, stop) for number in range(CLIENTS)]
    for client in clients:
        client.start()

    def answered_pids() -> set[int]:
        outcomes = [answer for client in clients for _, answer in client.outcomes]
        return {echoed(a)[1] for a in outcomes if isinstance(a, httpx.Response) and a.is_success}

    try:
        before = wait_for(lambda: len(pids := answered_pids()) == 2 and pids, "both workers")
        with httpx.Client(base_url=server.url, timeout=30) as client:
            bad = client.post("/v2/models/fragile/infer", json=echo_body([-1]))
        wait_for(lambda: len(answered_pids() - before) == 1, "the dead worker restarted")
        counts = [len(client.outcomes) for client in clients]
        wait_for(
            lambda: all(len(c.outcomes) > n + 3 for c, n in zip(clients, counts, strict=True)),
            "good requests after the restart",
        )
    finally:
        stop.set()
        for client in clients:
            client.join(35)
    assert bad.status_code == 503, bad.text
    assert "it was the only request running there" in bad.json()["error"]
    assert "not retried" in bad.json()["error"]
    (survivor,) = [pid for pid in before if is_running(pid)]
    assert len(before) == 2 and survivor in answered_pids(), "the other worker served on"
    outcomes = [outcome for client in clients for outcome in client.outcomes]
    failed = [(sent, a if isinstance(a, Exception) else a.text) for sent, a in outcomes
              if not isinstance(a, httpx.Response) or a.status_code != 200]  # fmt: skip
    assert failed == [], "every good request answered 200"
    assert all(echoed(a)[0] == sent for sent, a in outcomes if isinstance(a, httpx.Response))
    log = server.log()
    assert log.count("died running only a request of model 'fragile'") == 1
    assert "sending it again" not in log, "nothing was retried: nothing shared the dead worker"


@pytest.mark.parametrize("processes", [1, 3], ids=["1-process", "3-processes"])
def test_a_request_sent_to_a_dead_worker_before_its_death_is_noticed_is_no_suspect(
    tmp_path: Path, start: Callable[..., ServerProcess], processes: int
) -> None:
    """The worker never read it, so it never ran: it is sent to the restarted worker and
    answered 200, not 503 as the suspect of a death it had no part in. A child of the
    worker holds its socket open after the kill until the request arrives on it, so the
    server sends the request to the dead worker every time."""
    add_custom_model(tmp_path, "holding", "HoldsItsSocket", workers=1)
    server = start(tmp_path, settings={"parallel_workers": 1, "protocol_processes": processes})
    with httpx.Client(base_url=server.url, timeout=60) as client:
        first = client.post("/v2/models/holding/infer", json=echo_body([1], hold=True))
        assert first.status_code == 200, first.text
        _, killed = echoed(first)
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: not is_running(killed), "the worker dead")
        answer = client.post("/v2/models/holding/infer", json=echo_body([2]))
    assert answer.status_code == 200, answer.text
    values, pid = echoed(answer)
    assert values == [2] and pid != killed, "run by the restarted worker"
    log = server.log()
    assert "stopped before reading a request of model 'holding'" in log
    assert "it was the only request running there" not in log
