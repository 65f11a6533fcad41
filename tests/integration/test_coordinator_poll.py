"""The repository's changes applied in every process through the coordinator
(supervisor/repository_changes.py), as the supervisor's one poller sends them.

The same cluster as test_coordinator.py: whole servers for protocol processes 0
and 1 on their private sockets, process 2 down until a test starts it; each
switches a reload's new instances in at the coordinator's barrier.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from inferd.server.roles import HostStart, Role
from inferd.serving.operations import RepositoryReload
from inferd.settings import ModelSettings
from inferd.supervisor.forwarding import catch_up
from inferd.supervisor.paths import ProcessRole
from inferd.supervisor.repository_changes import ServerWideChanges
from inferd.types import ModelState
from inferd.workers.base import LoadedInstance
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES, StartServer
from .test_coordinator import Cluster, Process, infer

pytestmark = pytest.mark.anyio


@pytest.fixture
async def cluster(start_inferd: StartServer, repository: Path) -> AsyncIterator[Cluster]:
    # Under /tmp, short: a unix socket's path has at most 107 bytes.
    private_folder = Path(tempfile.mkdtemp(prefix="inferd-poll-"))
    cluster = await Cluster.start(private_folder, repository)
    yield cluster
    await cluster.stop()
    shutil.rmtree(private_folder, ignore_errors=True)


async def test_a_new_folder_is_served_by_every_process_and_a_later_one_catches_up(
    cluster: Cluster, repository: Path, start_inferd: StartServer
) -> None:
    changes = ServerWideChanges(cluster.coordinator)
    write_model_folder(repository, "late", f"{RUNTIMES}.Echo")
    await changes.reload("late")
    for process in cluster.processes:
        assert (await infer(process, "late")).status_code == 200
    assert cluster.coordinator.journal.operations() == [RepositoryReload("late")]
    third = await cluster.start_process(2, load_models_at_startup=False)
    assert await catch_up(ProcessRole(cluster.paths, 2, Role.PROTOCOL, HostStart.FOR_A_LOAD)) == {
        "applied": 1,
        "failed": [],
    }
    assert (await infer(third, "late")).status_code == 200


async def test_a_removed_folder_is_gone_from_every_process_at_once(
    cluster: Cluster, repository: Path
) -> None:
    changes = ServerWideChanges(cluster.coordinator)
    shutil.rmtree(repository / "echo")
    await changes.remove("echo")
    for process in cluster.processes:
        assert (await infer(process, "echo")).status_code == 404
    await changes.remove("echo")  # nothing left to remove: no failure either


async def test_a_folder_that_cannot_be_read_keeps_every_process_serving_and_says_why(
    cluster: Cluster, repository: Path
) -> None:
    changes = ServerWideChanges(cluster.coordinator)
    (repository / "echo" / "model-settings.json").write_text('{"name": "echo", ')
    await changes.reload("echo")
    for process in cluster.processes:
        assert (await infer(process, "echo")).status_code == 200
        version = process.server.registry.find("echo")
        assert version.state is ModelState.READY
        assert "Reloading failed" in version.reason and "model-settings.json" in version.reason


async def text_of(process: Process) -> str:
    answer = await infer(process, "text")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["outputs"][0]["data"][0])


async def test_a_reload_switches_every_process_once_every_one_has_loaded(
    cluster: Cluster, repository: Path
) -> None:
    """Process 1 loads slowly: process 0, loaded first, keeps serving the old
    version until process 1 has loaded too; then both serve the new one."""
    first, second = cluster.processes
    changes = ServerWideChanges(cluster.coordinator)
    folder = write_model_folder(
        repository, "text", f"{RUNTIMES}.ServesText", parameters={"uri": "./a.txt"}
    )
    (folder / "a.txt").write_text("old")
    await changes.reload("text")
    assert [await text_of(first), await text_of(second)] == ["old", "old"]

    gate = asyncio.Event()
    load = second.server.pool.load

    async def slow_load(instance_id: int, settings: ModelSettings) -> LoadedInstance:
        await gate.wait()
        return await load(instance_id, settings)

    second.server.pool.load = slow_load  # type: ignore[method-assign]
    (folder / "a.txt").write_text("new")
    reloading = asyncio.create_task(changes.reload("text"))
    await wait_for_async(
        lambda: any(b.waiting == {1} for b in cluster.coordinator._switches.values()),
        "process 0 to have loaded and wait at the switch",
    )
    assert [await text_of(first), await text_of(second)] == ["old", "old"]
    gate.set()
    await asyncio.wait_for(reloading, 10)
    assert [await text_of(first), await text_of(second)] == ["new", "new"]
    assert not cluster.coordinator._switches  # the barrier is gone with its reload
