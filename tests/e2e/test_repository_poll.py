"""The repository reloads itself (``repository_poll_secs``) under load.

A real server with one worker process polls its repository every 0.2 s while
eight clients send requests without pause. In turn: a model's artifact is
replaced (answers switch to the new text within two polls plus the load), a
folder is added (served), the first model's settings are broken (the old
version keeps serving; the index says why), and the added folder is removed
(404 once gone). Every answer is a 200, except a 404 for the removed model once
its folder is gone; none waits for a load.

With several protocol processes (``INFERD_TEST_PROTOCOL_PROCESSES``) the supervisor
polls and every process applies each change; a reload switches them together at
the coordinator's barrier, whose answers reach the processes within milliseconds
of each other, and a removal reaches them as fast (docs/design.md "The repository
polled once"): an old answer may follow a new one only within :data:`SPREAD`.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, default_protocol_processes

POLL_SECS = 0.2
# Each load takes this long: requests during it must be answered by the old instance.
LOAD_SECONDS = 1.0
CLIENTS = 8
# Scheduling on a shared 2-core machine (a poll, a request, a load's own steps).
SLACK = 1.0
SWITCH_BOUND = 2 * POLL_SECS + LOAD_SECONDS + SLACK
BODY = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [1]}]}
# How long after one process answers a change another may still answer as before:
# the barrier's (or the removal's) answers reaching each process, on a busy machine.
SPREAD = 0.0 if default_protocol_processes() == 1 else 0.1


def add_text_model(repository: Path, name: str, text: str) -> Path:
    settings: dict[str, Any] = {
        "parameters": {"uri": "./artifact.txt", "extra": {"load_seconds": LOAD_SECONDS}}
    }
    folder = add_custom_model(repository, name, "ServesArtifact", **settings)
    (folder / "artifact.txt").write_text(text)
    return folder


@dataclass(frozen=True, slots=True)
class Answer:
    model: str
    sent: float
    received: float
    status: int
    text: str


class Clients:
    """Threads sending requests back to back, each to the next of ``targets``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.targets = ["text"]
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(CLIENTS)]

    def __enter__(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            turn = 0
            while not self._stop.is_set():
                targets = self.targets
                model = targets[turn % len(targets)]
                turn += 1
                sent = time.monotonic()
                response = client.post(f"/v2/models/{model}/infer", json=BODY)
                text = response.json()["outputs"][0]["data"][0] if response.is_success else ""
                self.answers.append(
                    Answer(model, sent, time.monotonic(), response.status_code, text)
                )

    def first(self, accept: Callable[[Answer], bool]) -> Answer | None:
        return next((answer for answer in list(self.answers) if accept(answer)), None)

    def count(self, model: str, since: float = 0.0) -> int:
        return sum(a.model == model and a.sent >= since for a in list(self.answers))


def index_reason(server: ServerProcess, name: str) -> str:
    entries = httpx.post(f"{server.url}/v2/repository/index", json={}, timeout=10).json()
    return next((entry["reason"] for entry in entries if entry["name"] == name), "")


def model_ready(server: ServerProcess, name: str) -> bool:
    return httpx.get(f"{server.url}/v2/models/{name}/ready", timeout=10).status_code == 200


def test_the_repository_reloads_itself_under_load(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    repository = tmp_path / "models"
    add_text_model(repository, "text", "first")
    settings = {"parallel_workers": 1, "repository_poll_secs": POLL_SECS}
    server = start(repository, settings=settings)

    with Clients(server.url) as clients:
        wait_for(lambda: clients.count("text") >= 4 * CLIENTS, "the clients to be answered")

        # 1. The artifact is replaced: answers switch once the new instance is READY.
        replaced = time.monotonic()
        (repository / "text" / "artifact.txt").write_text("second")
        switched = wait_for(
            lambda: clients.first(lambda a: a.text == "second"), "the new artifact", timeout=15
        )

        # 2. A folder is added: it is served.
        added = time.monotonic()
        add_text_model(repository, "added", "added one")
        wait_for(lambda: model_ready(server, "added"), "the added model", timeout=15)
        became_ready = time.monotonic()
        clients.targets = ["text", "added"]
        wait_for(lambda: clients.count("added") >= 4 * CLIENTS, "answers of the added model")

        # 3. The first model's settings break: its loaded version keeps serving.
        broken = time.monotonic()
        (repository / "text" / "model-settings.json").write_text('{"name": "text", ')
        reason = wait_for(lambda: index_reason(server, "text"), "the index to say why")
        noticed = time.monotonic()
        wait_for(lambda: clients.count("text", since=noticed) >= 4 * CLIENTS, "more answers")

        # 4. The added folder is removed: its model answers 404 once it is gone.
        removed = time.monotonic()
        shutil.rmtree(repository / "added")
        gone = wait_for(
            lambda: clients.first(lambda a: a.model == "added" and a.status == 404),
            "the removed model to answer 404",
            timeout=15,
        )
        clients.targets = ["text"]
        last = time.monotonic()
        wait_for(lambda: clients.count("text", since=last) >= 4 * CLIENTS, "the last answers")

    answers = clients.answers
    latencies = sorted(answer.received - answer.sent for answer in answers)
    print(
        f"\n{len(answers)} answers; switch {switched.received - replaced:.2f}s, added ready "
        f"{became_ready - added:.2f}s, broken noticed {noticed - broken:.2f}s, removed "
        f"{gone.received - removed:.2f}s; latency p50 "
        f"{latencies[len(latencies) // 2] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
    )
    assert switched.received - replaced < SWITCH_BOUND
    assert became_ready - added < SWITCH_BOUND
    assert gone.received - removed < 2 * POLL_SECS + SLACK
    # None waited for a load: the old instance answered during each.
    assert latencies[-1] < LOAD_SECONDS, latencies[-10:]
    after_switch = [a for a in answers if a.model == "text" and a.sent > switched.received + SPREAD]
    assert after_switch and {a.text for a in after_switch} == {"second"}
    unexpected = [
        answer
        for answer in answers
        if answer.status != 200
        and not (answer.model == "added" and answer.status == 404 and answer.sent >= removed)
    ]
    assert not unexpected, unexpected[:5]
    # Once gone, gone: no 200 (nor 503) for the removed model after its first 404.
    after_gone = [a for a in answers if a.model == "added" and a.sent > gone.received + SPREAD]
    assert all(a.status == 404 for a in after_gone)
    assert "model-settings.json" in reason and "cannot be read as JSON" in reason
    assert "Model 'text' changed on disk but cannot be loaded" in server.log()
