"""Which loads start the model host (supervisor/host_on_demand.py), and the journal's
reading of a load (supervisor/journal.py ``loaded_model``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from inferd.settings import ServerSettings
from inferd.supervisor.host_on_demand import HostOnDemand, HostUnavailable
from inferd.supervisor.journal import Call, loaded_model, loads_a_model, unloads_a_model
from tests.support.models import add_custom_model


def on_demand(repository: Path, start: object = None) -> HostOnDemand:
    async def never() -> None:
        raise AssertionError("not started here")

    settings = ServerSettings(model_repository_root=str(repository))
    return HostOnDemand(settings, start or never)  # type: ignore[arg-type]


def test_a_model_every_process_may_copy_needs_no_host(tmp_path: Path) -> None:
    add_custom_model(tmp_path, "plain", "SlowEcho")
    assert not on_demand(tmp_path).needs_host("plain", None)


def test_a_configuration_override_that_turns_batching_on_needs_the_host(tmp_path: Path) -> None:
    add_custom_model(tmp_path, "simple", "SlowEcho")
    assert on_demand(tmp_path).needs_host("simple", '{"max_batch_size": "16"}')
    add_custom_model(tmp_path, "pinned", "SlowEcho", workers=1)
    assert on_demand(tmp_path).needs_host("pinned", None)


def test_settings_that_cannot_be_read_start_nothing(tmp_path: Path) -> None:
    """Every process refuses such a load and says why: no host is started for it."""
    assert not on_demand(tmp_path).needs_host("missing", None)
    add_custom_model(tmp_path, "simple", "SlowEcho")
    assert not on_demand(tmp_path).needs_host("simple", "{not json")


@pytest.mark.anyio
async def test_loads_at_once_start_the_host_once_and_a_failed_start_is_tried_again(
    tmp_path: Path,
) -> None:
    starts: list[int] = []
    fail = True

    async def start() -> None:
        starts.append(1)
        await asyncio.sleep(0.05)
        if fail:
            raise RuntimeError("it exited")

    host = on_demand(tmp_path, start)
    outcomes = await asyncio.gather(host.start(), host.start(), return_exceptions=True)
    assert len(starts) == 1
    assert all(isinstance(outcome, HostUnavailable) for outcome in outcomes)
    assert "could not be started: it exited" in str(outcomes[0])
    fail = False
    await host.start()
    assert len(starts) == 2


def test_the_journal_reads_which_model_a_call_loads_and_its_override() -> None:
    body = orjson.dumps({"parameters": {"config": '{"max_batch_size":"16"}'}})
    load = Call("POST", "/v2/repository/models/a%2Fb/load", body)
    assert loaded_model(load) == ("a/b", '{"max_batch_size":"16"}')
    assert loaded_model(Call("POST", "/v2/repository/models/m/load")) == ("m", None)
    reload = Call("POST", "/private/repository/models/m/reload")
    assert loaded_model(reload) == ("m", None) and loads_a_model(reload.path)
    assert loaded_model(Call("POST", "/v2/repository/models/m/unload")) is None
    assert unloads_a_model("/private/repository/models/m/remove")
    assert not loads_a_model("/v2/repository/models/m/reload")  # no such API route
