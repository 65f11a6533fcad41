"""Which loads start the model host (host/on_demand.py), and the journal's
reading of which model an operation loads (supervisor/host_order.py ``loaded_model``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from inferd.host.on_demand import HostOnDemand, HostUnavailable
from inferd.host.placement import LOADED_LATER, Placement
from inferd.serving.operations import (
    ChangeLogSettings,
    Load,
    LoadOnRequest,
    RepositoryReload,
    RepositoryRemove,
    Unload,
)
from inferd.serving.repository import ModelRepository
from inferd.settings import ServerSettings
from inferd.supervisor.host_order import loaded_model
from tests.support.models import add_custom_model


def on_demand(repository: Path, start: object = None) -> HostOnDemand:
    async def never() -> None:
        raise AssertionError("not started here")

    settings = ServerSettings(model_repository_root=str(repository))
    # The placement inferd start made of the repository as it is now.
    placement = Placement.decide(settings, ModelRepository(repository).find_all())
    return HostOnDemand(settings, start or never, placement.copied_names())  # type: ignore[arg-type]


def test_a_model_loaded_after_the_start_runs_in_the_host_whatever_its_settings(
    tmp_path: Path,
) -> None:
    """Loaded later in each protocol process it would be a copy per process."""
    add_custom_model(tmp_path, "plain", "SlowEcho")
    assert on_demand(tmp_path).placement("plain", None) == LOADED_LATER
    assert on_demand(tmp_path).placement("plain", None) is not None


def test_a_request_s_first_load_of_a_model_the_fork_parent_holds_is_adopted(
    tmp_path: Path,
) -> None:
    """The fork parent loaded it at start: each process adopts that copy, shared."""
    add_custom_model(tmp_path, "plain", "SlowEcho")
    host = on_demand(tmp_path)  # the repository as it was at the start
    add_custom_model(tmp_path, "added", "SlowEcho")
    assert host.placement("plain", None, on_request=True) is None
    assert host.placement("added", None, on_request=True) == LOADED_LATER
    assert host.placement("plain", None) == LOADED_LATER  # an API load or reload: the host
    assert host.placement("plain", None, on_request=True) == LOADED_LATER  # stays there


def test_a_request_s_next_load_of_an_adopted_model_runs_in_the_host(tmp_path: Path) -> None:
    """The parent's copy is adopted once: loaded again on request (after an eviction or
    an unload) each process would load a copy of its own."""
    add_custom_model(tmp_path, "plain", "SlowEcho")
    host = on_demand(tmp_path)
    assert host.placement("plain", None, on_request=True) is None
    assert host.placement("plain", None, on_request=True) == LOADED_LATER


def test_a_configuration_override_that_turns_batching_on_needs_the_host(tmp_path: Path) -> None:
    add_custom_model(tmp_path, "simple", "SlowEcho")
    reason = on_demand(tmp_path).placement("simple", '{"max_batch_size": "16"}', on_request=True)
    assert reason is not None and "max_batch_size: 16" in reason
    add_custom_model(tmp_path, "pinned", "SlowEcho", workers=1)
    assert on_demand(tmp_path).placement("pinned", None) is not None


def test_settings_that_cannot_be_read_start_nothing(tmp_path: Path) -> None:
    """Every process refuses such a load and says why: no host is started for it."""
    assert on_demand(tmp_path).placement("missing", None) is None
    add_custom_model(tmp_path, "simple", "SlowEcho")
    assert on_demand(tmp_path).placement("simple", "{not json") is None


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


def test_the_coordinator_reads_which_model_an_operation_loads_and_its_override() -> None:
    assert loaded_model(Load("a/b", '{"max_batch_size":"16"}')) == (
        "a/b",
        '{"max_batch_size":"16"}',
    )
    assert loaded_model(Load("m")) == ("m", None)
    assert loaded_model(LoadOnRequest("m", evict="n")) == ("m", None)
    assert loaded_model(RepositoryReload("m", switch=2)) == ("m", None)
    for other in (Unload("m"), RepositoryRemove("m"), ChangeLogSettings({})):
        assert loaded_model(other) is None
