"""workers/preloaded.py: a forked protocol process adopts what its parent loaded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from inferd.model import Model
from inferd.settings import ModelSettings
from inferd.workers import preloaded
from inferd.workers.inprocess import InProcessPool


@pytest.fixture(autouse=True)
def nothing_preloaded() -> Iterator[None]:
    yield
    preloaded._models.clear()
    preloaded._forked = False
    preloaded._told.clear()


def test_a_model_is_adopted_once_and_only_with_the_same_settings() -> None:
    model = Model(ModelSettings(name="m", implementation="x.Y"))
    preloaded.offer([model])
    assert preloaded.take(ModelSettings(name="m", implementation="x.Other")) is None
    assert preloaded.take(ModelSettings(name="m", implementation="x.Y")) is model
    assert preloaded.take(ModelSettings(name="m", implementation="x.Y")) is None


def test_a_model_not_loaded_before_the_fork_is_said_to_cost_a_copy_per_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    preloaded.offer([])
    caplog.set_level("INFO")
    settings = ModelSettings(name="later", implementation="x.Y")
    assert preloaded.take(settings) is None
    assert preloaded.take(settings) is None
    said = [r.message for r in caplog.records if "not loaded before" in r.message]
    assert said == [
        "The model 'later' was not loaded before this protocol process was forked: it is "
        "loaded in each protocol process (one copy of its memory per process)"
    ]


class Loaded(Model):
    async def load(self) -> bool:
        self.loaded_here = True
        return True


def test_the_in_process_pool_adopts_instead_of_loading() -> None:
    settings = ModelSettings(name="m", implementation=f"{__name__}.Loaded")
    model = Loaded(settings)
    model.ready = True
    preloaded.offer([model])

    async def load_twice() -> None:
        pool = InProcessPool()
        await pool.load(1, settings)
        adopted = pool.loaded(1)
        assert adopted is not None and adopted.model is model
        await pool.load(2, settings)  # a second instance: loaded afresh
        fresh = pool.loaded(2)
        assert fresh is not None and fresh.model is not model
        assert getattr(fresh.model, "loaded_here", False)
        await pool.close()

    asyncio.run(load_twice())
    assert not hasattr(model, "loaded_here")  # adopted: its load() did not run again
