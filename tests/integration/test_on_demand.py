"""Models loaded on request under max_loaded_models (serving/on_demand.py), in process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import ModelNotFound, Overloaded
from inferd.server.app import InferenceServer
from inferd.types import InferenceRequest, Tensor
from tests.support.models import write_model_folder

from .conftest import RUNTIMES, StartServer
from .runtimes import Gated

pytestmark = pytest.mark.anyio


def request(**parameters: object) -> InferenceRequest:
    return InferenceRequest(inputs=[Tensor("x", np.array([1.0]))], parameters=dict(parameters))


def loaded(server: InferenceServer) -> set[str]:
    return set(server.registry.names())


async def use(server: InferenceServer, *names: str) -> None:
    for name in names:
        await server.dataplane.infer(name, None, request())


async def test_nothing_loads_at_start_and_a_request_loads_its_model(
    start_inferd: StartServer,
) -> None:
    server = await start_inferd(load_on_request=True)
    assert loaded(server) == set()
    assert not server.dataplane.model_ready("echo")  # and asking did not load it
    assert loaded(server) == set()
    await use(server, "echo")
    assert loaded(server) == {"echo"}
    with pytest.raises(ModelNotFound):
        await use(server, "nope")


async def test_the_least_recently_used_goes_and_pinned_models_stay(
    start_inferd: StartServer, repository: Path
) -> None:
    write_model_folder(repository, "other", f"{RUNTIMES}.Echo")
    server = await start_inferd(load_on_request=True, max_loaded_models=2)
    await server.dataplane.load("iris")  # pinned: neither counted nor evicted
    await use(server, "echo", "versioned", "echo", "other")
    assert loaded(server) == {"iris", "echo", "other"}  # versioned was least recent
    await use(server, "versioned")
    assert loaded(server) == {"iris", "versioned", "other"}
    on_demand = server.dataplane.on_demand
    assert on_demand is not None
    assert on_demand.evictions == {"versioned": 1, "echo": 1}
    assert on_demand.loads == {"echo": 1, "versioned": 2, "other": 1}


async def test_concurrent_first_requests_share_one_load(start_inferd: StartServer) -> None:
    server = await start_inferd(load_on_request=True, max_loaded_models=1)
    await asyncio.gather(*(use(server, "versioned") for _ in range(10)))
    on_demand = server.dataplane.on_demand
    assert on_demand is not None and on_demand.loads == {"versioned": 1}


async def test_a_failed_load_answers_every_waiter_and_is_tried_again(
    start_inferd: StartServer, repository: Path
) -> None:
    write_model_folder(repository, "broken", "no_such_module.Model")
    server = await start_inferd(load_on_request=True)
    outcomes = await asyncio.gather(
        *(use(server, "broken") for _ in range(5)), return_exceptions=True
    )
    for outcome in outcomes:
        assert isinstance(outcome, Exception)
        assert "failed to load 'broken'" in str(outcome)
        assert "no_such_module" in str(outcome)
    write_model_folder(repository, "broken", f"{RUNTIMES}.Echo")
    await use(server, "broken")  # the next request tries again


async def test_a_busy_model_is_not_evicted_the_wait_ends_in_overloaded(
    start_inferd: StartServer,
) -> None:
    server = await start_inferd(load_on_request=True, max_loaded_models=1)
    held = asyncio.create_task(use(server, "gated"))
    while not Gated.running:
        await asyncio.sleep(0.01)
    with pytest.raises(Overloaded, match=r"max_loaded_models \(1\)") as refused:
        await server.dataplane.infer("echo", None, request(timeout=200_000))
    assert refused.value.retry_after
    waiting = asyncio.create_task(use(server, "echo"))  # waits for the slot
    await asyncio.sleep(0.1)
    assert loaded(server) == {"gated"}
    Gated.gate.set()
    await held
    await waiting
    assert loaded(server) == {"echo"}


async def test_a_model_with_an_open_sequence_is_not_evicted(
    start_inferd: StartServer, repository: Path
) -> None:
    write_model_folder(
        repository,
        "seq",
        f"{RUNTIMES}.Echo",
        sequence_batching={"max_sequence_idle_microseconds": 60_000_000},
    )
    server = await start_inferd(load_on_request=True, max_loaded_models=1)
    await server.dataplane.infer("seq", None, request(sequence_id=7, sequence_start=True))
    with pytest.raises(Overloaded):
        await server.dataplane.infer("echo", None, request(timeout=200_000))
    assert loaded(server) == {"seq"}
    await server.dataplane.infer("seq", None, request(sequence_id=7, sequence_end=True))
    await use(server, "echo")
    assert loaded(server) == {"echo"}
