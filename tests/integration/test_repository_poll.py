"""Repository polling in process: the server's poller driven one poll at a time.

The server polls only when told (``repository_poll_secs`` is an hour): a change is
seen by one poll and acted on by the next, when the folder has not moved since.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from inferd.server.app import InferenceServer
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES, StartServer, rest_client
from .runtimes import ServesText

pytestmark = pytest.mark.anyio

ONE_HOUR = 3600.0
INPUT = {"name": "x", "datatype": "INT64", "shape": [1], "data": [1]}


def add_text_model(repository: Path, name: str, text: str) -> Path:
    # Four at a time: one request may be held while others go through.
    settings = {"parameters": {"uri": "./artifact.txt"}, "threads_per_worker": 4}
    folder = write_model_folder(repository, name, f"{RUNTIMES}.ServesText", **settings)
    (folder / "artifact.txt").write_text(text)
    return folder


def write_models(repository: Path) -> Path:
    """One model, ``text``, answering "one"."""
    add_text_model(repository, "text", "one")
    return repository


@pytest.fixture
async def polled(start_inferd: StartServer) -> AsyncIterator[InferenceServer]:
    ServesText.gate = asyncio.Event()
    server = await start_inferd(repository_poll_secs=ONE_HOUR)
    assert server.poller is not None
    yield server
    ServesText.gate.set()  # let held requests end before their models unload


async def apply_changes(server: InferenceServer) -> None:
    """Two polls (the change seen, then seen again unchanged), then its loads end."""
    assert server.poller is not None
    await server.poller.poll()
    await server.poller.poll()
    await server.poller.settled()


def in_flight(server: InferenceServer, name: str) -> int:
    scheduler = server.registry.get_ready(name).scheduler
    return scheduler.in_flight if scheduler is not None else 0


async def infer(client: httpx.AsyncClient, name: str, hold: bool = False) -> httpx.Response:
    body = {"inputs": [INPUT], "parameters": {"hold": hold}}
    return await client.post(f"/v2/models/{name}/infer", json=body)


async def answer(client: httpx.AsyncClient, name: str) -> str:
    response = await infer(client, name)
    assert response.status_code == 200, response.text
    return str(response.json()["outputs"][0]["data"][0])


async def index_entry(client: httpx.AsyncClient, name: str) -> dict[str, str]:
    entries = (await client.post("/v2/repository/index", json={})).json()
    return next(entry for entry in entries if entry["name"] == name)


async def test_a_changed_artifact_switches_traffic_once_loaded_and_the_old_finishes_its_own(
    polled: InferenceServer, repository: Path
) -> None:
    async with rest_client(polled) as client:
        held = asyncio.create_task(infer(client, "text", hold=True))
        await wait_for_async(lambda: in_flight(polled, "text"), "a held request")
        (repository / "text" / "artifact.txt").write_text("second")
        assert polled.poller is not None
        await polled.poller.poll()
        assert await answer(client, "text") == "one"  # seen once: it may still be written
        await polled.poller.poll()

        async def switched() -> bool:
            return await answer(client, "text") == "second"

        await wait_for_async(switched, "the new version to answer")
        assert not held.done()  # still in flight on the old instance, which waits for it
        ServesText.gate.set()
        old_answer = await held
        await polled.poller.settled()
    assert old_answer.status_code == 200
    assert old_answer.json()["outputs"][0]["data"] == ["one"]


async def test_a_broken_settings_file_keeps_the_old_version_serving_and_the_index_says_why(
    polled: InferenceServer, repository: Path
) -> None:
    (repository / "text" / "model-settings.json").write_text('{"name": "text", ')
    await apply_changes(polled)
    async with rest_client(polled) as client:
        assert await answer(client, "text") == "one"
        entry = await index_entry(client, "text")
    assert entry["state"] == "READY"
    assert "Reloading failed, the previous instance keeps serving" in entry["reason"]
    assert "model-settings.json: cannot be read as JSON" in entry["reason"]


async def test_a_failing_load_keeps_the_old_version_serving_and_the_index_says_why(
    polled: InferenceServer, repository: Path
) -> None:
    (repository / "text" / "artifact.txt").write_text("fail, on purpose")
    await apply_changes(polled)
    async with rest_client(polled) as client:
        assert await answer(client, "text") == "one"
        entry = await index_entry(client, "text")
        # Fixed: the next change loads, and the reason goes.
        (repository / "text" / "artifact.txt").write_text("fixed")
        await apply_changes(polled)
        assert await answer(client, "text") == "fixed"
        fixed = await index_entry(client, "text")
    assert entry["state"] == "READY"
    assert "the artifact says 'fail, on purpose'" in entry["reason"]
    assert fixed["reason"] == ""


async def test_a_new_folder_is_served_and_a_removed_one_answers_404_once_in_flight_ended(
    polled: InferenceServer, repository: Path
) -> None:
    add_text_model(repository, "added", "new one")
    await apply_changes(polled)
    async with rest_client(polled) as client:
        assert await answer(client, "added") == "new one"
        held = asyncio.create_task(infer(client, "text", hold=True))
        await wait_for_async(lambda: in_flight(polled, "text"), "a held request")
        shutil.rmtree(repository / "text")
        assert polled.poller is not None
        await polled.poller.poll()
        await polled.poller.poll()

        async def gone() -> bool:
            return (await infer(client, "text")).status_code == 404

        await wait_for_async(gone, "the removed model to answer 404")
        ServesText.gate.set()
        held_answer = await held
        await polled.poller.settled()
        index = (await client.post("/v2/repository/index", json={})).json()
    assert held_answer.status_code == 200
    assert held_answer.json()["outputs"][0]["data"] == ["one"]
    assert [entry["name"] for entry in index] == ["added"]


async def test_a_model_unloaded_through_the_api_stays_unloaded_until_its_files_change(
    polled: InferenceServer, repository: Path
) -> None:
    async with rest_client(polled) as client:
        unloaded = await client.post("/v2/repository/models/text/unload")
        assert unloaded.status_code == 200
        await apply_changes(polled)
        assert (await infer(client, "text")).status_code == 404
        (repository / "text" / "artifact.txt").write_text("changed since")
        await apply_changes(polled)
        assert await answer(client, "text") == "changed since"


async def test_a_folder_still_being_written_is_not_loaded_until_it_stops_changing(
    polled: InferenceServer, repository: Path
) -> None:
    assert polled.poller is not None
    folder = add_text_model(repository, "copying", "part")
    await polled.poller.poll()
    (folder / "artifact.txt").write_text("part and more")
    await polled.poller.poll()
    await polled.poller.settled()
    assert "copying" not in polled.registry.names()
    await polled.poller.poll()
    await polled.poller.settled()
    async with rest_client(polled) as client:
        assert await answer(client, "copying") == "part and more"


async def test_a_repository_root_that_goes_away_unloads_nothing(
    polled: InferenceServer, repository: Path
) -> None:
    moved = repository.with_name("elsewhere")
    repository.rename(moved)
    await apply_changes(polled)
    moved.rename(repository)
    async with rest_client(polled) as client:
        assert await answer(client, "text") == "one"


async def test_settings_that_rename_a_model_unload_the_old_name_and_load_the_new(
    polled: InferenceServer, repository: Path
) -> None:
    settings_file = repository / "text" / "model-settings.json"
    settings = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps(settings | {"name": "renamed"}))
    await apply_changes(polled)
    async with rest_client(polled) as client:
        assert await answer(client, "renamed") == "one"
        assert (await infer(client, "text")).status_code == 404


async def test_a_removed_folder_unloads_even_while_another_settings_file_is_unreadable(
    polled: InferenceServer, repository: Path
) -> None:
    """The unreadable file names no model, but its folder served ``text``: it is not
    taken for the removed model."""
    add_text_model(repository, "other", "other one")
    await apply_changes(polled)
    (repository / "text" / "model-settings.json").write_text("{")
    shutil.rmtree(repository / "other")
    await apply_changes(polled)
    async with rest_client(polled) as client:
        assert (await infer(client, "other")).status_code == 404
        assert await answer(client, "text") == "one"
        entry = await index_entry(client, "text")
    assert "cannot be read as JSON" in entry["reason"]
