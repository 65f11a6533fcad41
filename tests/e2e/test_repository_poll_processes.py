"""``repository_poll_secs`` with three protocol processes: the supervisor polls the
repository once, and each change reaches every process through the coordinator.

A changed artifact, an added version and a new folder of a model that must run in
the model host (which starts for it) are each, once the supervisor says the change
is applied, served the same by every protocol process (each asked on its private
socket); no protocol process polls on its own. How far apart the
processes switched is printed (docs/design.md "The repository polled once").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.each_process import ask_each
from tests.e2e.test_repository_poll import BODY, add_text_model
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess

POLL_SECS = 0.2
PROCESSES = 3


def texts(server: ServerProcess) -> list[str]:
    """The text each protocol process's ``text`` model answers now."""
    answers = ask_each(server, "POST", "/v2/models/text/infer", json=BODY)
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    return [answer.json()["outputs"][0]["data"][0] for answer in answers]


def applied(server: ServerProcess, name: str, action: str, times: int = 1) -> bool:
    line = f"Model {name!r}: the repository's change ({action}) is applied"
    return server.log().count(line) >= times


def test_a_changed_folder_and_an_added_version_are_served_alike_by_every_process(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    repository = tmp_path / "models"
    add_text_model(repository, "text", "first")
    add_custom_model(repository, "double/v1", "AsyncDouble", parameters={"version": "1"})
    settings = {"protocol_processes": PROCESSES, "repository_poll_secs": POLL_SECS}
    server = start(repository, settings=settings)
    assert texts(server) == ["first"] * PROCESSES

    # A changed artifact: each process switches once its new instance is loaded.
    (repository / "text" / "artifact.txt").write_text("second")
    switched: dict[int, float] = {}

    def every_one_switched() -> bool:
        now = time.monotonic()
        for index, text in enumerate(texts(server)):
            if text == "second":
                switched.setdefault(index, now)
        return len(switched) == PROCESSES

    wait_for(every_one_switched, server.log, 30, 0.0)
    wait_for(lambda: applied(server, "text", "reload"), server.log, 30)
    assert texts(server) == ["second"] * PROCESSES
    print(f"\nthe processes switched within {max(switched.values()) - min(switched.values()):.3f}s")

    # An added version: served by every process once applied, and the default there.
    add_custom_model(repository, "double/v2", "AsyncDouble", parameters={"version": "2"})
    wait_for(lambda: applied(server, "double", "reload"), server.log, 30)
    versions = ask_each(server, "GET", "/v2/models/double/versions/2/ready")
    assert [answer.status_code for answer in versions] == [200] * PROCESSES
    metadata = ask_each(server, "GET", "/v2/models/double")
    assert [answer.json()["versions"] for answer in metadata] == [["1", "2"]] * PROCESSES

    # A load after the start runs in the model host (one copy for every process): the
    # changed folder's reload started it.
    hosted = "runs in the model host, once, for every protocol process: "
    assert f"Model 'text' {hosted}it is loaded after the start" in server.log()
    assert server.log().count("Starting the model host") == 1
    # A folder of a model that batches: hosted for that too, as at start.
    add_custom_model(repository, "batched", "SlowEcho", max_batch_size=4)
    wait_for(lambda: applied(server, "batched", "reload"), server.log, 60)
    ready = ask_each(server, "GET", "/v2/models/batched/ready")
    assert [answer.status_code for answer in ready] == [200] * PROCESSES
    assert f"Model 'batched' {hosted}it batches adaptively" in server.log()

    log = server.log()
    assert "[inferd.serving.repository_poll] Polling the model repository" in log
    assert "[protocol process" not in log.split("Polling the model repository")[0].splitlines()[-1]
    assert log.count("Polling the model repository") == 1  # the supervisor's alone
    # The server's events once: each reload is told by the process that speaks for it.
    told = [line for line in log.splitlines() if " INFO " in line]
    assert sum("Model 'text' loaded from the repository" in line for line in told) == 1, told
