"""The registry's state machine, driven through a fake in-memory pool."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from inferd.context import RequestContext
from inferd.errors import ModelError, ModelNotFound, ModelNotReady
from inferd.model import Model
from inferd.observability.stats import ModelStats, ModelStatsTable
from inferd.serving.backends import BackendChoice, Opened
from inferd.serving.registry import Registry
from inferd.settings import ModelSettings
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata, ModelState, Tensor
from inferd.workers.base import Call, Control, Execution, LoadedInstance

pytestmark = pytest.mark.anyio

Key = tuple[str, str | None]


class FakePool:
    """Loads instantly (or when a gate opens), fails on demand, answers with the instance id."""

    def __init__(self) -> None:
        self.loaded: dict[int, ModelSettings] = {}
        self.unloaded: list[int] = []
        self.failures: dict[Key, str] = {}
        self.gates: dict[Key, asyncio.Event] = {}
        self.instance_failed: Callable[[int, str], None] | None = None

    async def start(self) -> None:
        """Nothing to start."""

    async def close(self) -> None:
        self.loaded.clear()

    async def load(self, instance_id: int, settings: ModelSettings) -> LoadedInstance:
        key = (settings.name, settings.version)
        if key in self.gates:
            await self.gates[key].wait()
        if key in self.failures:
            raise ModelError(self.failures[key])
        self.loaded[instance_id] = settings
        return LoadedInstance(ModelMetadata(name=settings.name, platform=f"fake-{instance_id}"))

    async def unload(self, instance_id: int) -> None:
        self.loaded.pop(instance_id, None)
        self.unloaded.append(instance_id)

    def predict(self, call: Call) -> Execution:
        return Execution.inline(self._answer(call.instance_id))

    async def _answer(self, instance_id: int) -> InferenceResponse:
        return InferenceResponse([Tensor("instance", np.array([instance_id]))])

    def capacity(self, instance_id: int) -> int:
        return 1 if instance_id in self.loaded else 0

    def restarting(self, instance_id: int) -> bool:
        return False

    def watch(self, instance_id: int, on_capacity_change: Callable[[], None]) -> None:
        """Capacity never changes here."""

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        self.instance_failed = handler


def version(name: str, version: str | None = None) -> ModelSettings:
    parameters = {"version": version} if version else {}
    return model_settings_from_dict(
        {"name": name, "implementation": "fake.Runtime", "parameters": parameters}, None
    )


async def served_by(registry: Registry, name: str, version: str | None = None) -> int:
    """The instance id that answers a request to the model right now."""
    found = registry.get_ready(name, version)
    assert found.calls is not None
    response = await found.calls.submit(InferenceRequest([]), RequestContext())
    return int(response.outputs[0].data[0])


@pytest.fixture
def pool() -> FakePool:
    return FakePool()


@pytest.fixture
def registry(pool: FakePool) -> Registry:
    return Registry(pool, ModelStatsTable())


async def test_a_loaded_model_is_ready_with_its_metadata(registry: Registry) -> None:
    await registry.load("iris", [version("iris")])
    found = registry.get_ready("iris")
    assert (found.state, found.reason) == (ModelState.READY, "")
    assert found.instance is not None and found.instance.metadata.name == "iris"
    assert registry.all_ready()
    assert await served_by(registry, "iris") == 1


async def test_a_model_is_loading_until_its_load_finishes(
    registry: Registry, pool: FakePool
) -> None:
    pool.gates[("slow", None)] = gate = asyncio.Event()
    loading = asyncio.create_task(registry.load("slow", [version("slow")]))
    await asyncio.sleep(0)  # let the load start and park at the gate
    assert registry.find("slow").state is ModelState.LOADING
    assert not registry.all_ready()
    with pytest.raises(ModelNotReady, match="Model 'slow' is not ready: it is loading"):
        registry.get_ready("slow")
    gate.set()
    await loading
    assert registry.find("slow").state is ModelState.READY


async def test_a_failed_load_makes_the_version_unavailable_with_the_reason(
    registry: Registry, pool: FakePool
) -> None:
    pool.failures[("broken", None)] = "weights not found"
    with pytest.raises(ModelError, match="weights not found"):
        await registry.load("broken", [version("broken")])
    found = registry.find("broken")
    assert (found.state, found.reason) == (ModelState.UNAVAILABLE, "weights not found")
    with pytest.raises(ModelNotReady, match="Model 'broken' is unavailable: weights not found"):
        registry.get_ready("broken")
    assert pool.unloaded == [1]  # whatever the failed load left behind is released
    (entry,) = registry.index()
    assert (entry.name, entry.state, entry.reason) == (
        "broken",
        ModelState.UNAVAILABLE,
        "weights not found",
    )


async def test_a_reload_swaps_instances_once_the_new_one_is_ready(
    registry: Registry, pool: FakePool
) -> None:
    await registry.load("m", [version("m")])
    pool.gates[("m", None)] = gate = asyncio.Event()
    reloading = asyncio.create_task(registry.load("m", [version("m")]))
    await asyncio.sleep(0)
    assert registry.find("m").state is ModelState.READY
    assert await served_by(registry, "m") == 1  # the old instance answers meanwhile
    gate.set()
    await reloading
    assert await served_by(registry, "m") == 2
    assert pool.unloaded == [1]


async def test_a_failed_reload_keeps_the_old_instance_serving(
    registry: Registry, pool: FakePool
) -> None:
    await registry.load("m", [version("m", "1")])
    pool.failures[("m", "1")] = "new weights are corrupt"
    with pytest.raises(ModelError, match="new weights are corrupt"):
        await registry.load("m", [version("m", "1")])
    found = registry.get_ready("m", "1")
    assert found.state is ModelState.READY
    assert found.reason == (
        "Reloading failed, the previous instance keeps serving: new weights are corrupt"
    )
    assert await served_by(registry, "m", "1") == 1
    assert pool.unloaded == [2]


async def test_one_failing_version_does_not_stop_the_others(
    registry: Registry, pool: FakePool
) -> None:
    pool.failures[("m", "1")] = "boom"
    with pytest.raises(ModelError, match="boom"):
        await registry.load("m", [version("m", "1"), version("m", "2")])
    assert registry.find("m", "1").state is ModelState.UNAVAILABLE
    assert registry.find("m", "2").state is ModelState.READY


async def test_the_default_version_is_the_highest_in_natural_order(registry: Registry) -> None:
    await registry.load("m", [version("m", tag) for tag in ("v9", "v10", "v2")])
    assert registry.find("m").version == "v10"
    assert await served_by(registry, "m") == await served_by(registry, "m", "v10")


async def test_the_default_version_skips_versions_that_are_not_ready(
    registry: Registry, pool: FakePool
) -> None:
    pool.failures[("m", "10")] = "boom"
    with pytest.raises(ModelError):
        await registry.load("m", [version("m", "9"), version("m", "10")])
    assert registry.find("m").version == "9"


async def test_an_unversioned_entry_is_the_default(registry: Registry) -> None:
    await registry.load("m", [version("m", "7"), version("m")])
    assert registry.find("m").version is None


async def test_versions_gone_from_disk_are_unloaded_on_reload(
    registry: Registry, pool: FakePool
) -> None:
    await registry.load("m", [version("m", "1"), version("m", "2")])
    await registry.load("m", [version("m", "2")])
    assert [found.version for found in registry.versions()] == ["2"]
    assert 1 in pool.unloaded  # version 1's instance
    with pytest.raises(
        ModelNotFound, match="Request for unknown model: 'm' version 1 is not found"
    ):
        registry.find("m", "1")


async def test_unload_removes_every_version(registry: Registry, pool: FakePool) -> None:
    await registry.load("m", [version("m", "1"), version("m", "2")])
    await registry.load("other", [version("other")])
    await registry.unload("m")
    assert registry.names() == ["other"]
    assert sorted(pool.unloaded) == [1, 2]
    with pytest.raises(ModelNotFound, match="Request for unknown model: 'm' is not found"):
        registry.find("m")
    with pytest.raises(ModelNotFound):
        await registry.unload("m")


async def test_unknown_models_and_versions_are_not_found(registry: Registry) -> None:
    with pytest.raises(ModelNotFound, match="Request for unknown model: 'nope' is not found"):
        registry.get_ready("nope")
    await registry.load("m", [version("m", "1")])
    with pytest.raises(
        ModelNotFound, match="Request for unknown model: 'm' version 2 is not found"
    ):
        registry.get_ready("m", "2")


async def test_close_unloads_everything(registry: Registry, pool: FakePool) -> None:
    await registry.load("a", [version("a")])
    await registry.load("b", [version("b", "1")])
    await registry.close()
    assert registry.versions() == []
    assert pool.loaded == {}


async def test_an_instance_the_pool_gives_up_on_becomes_unavailable(
    registry: Registry, pool: FakePool
) -> None:
    await registry.load("m", [version("m")])
    assert pool.instance_failed is not None
    pool.instance_failed(1, "its worker crashed three times")
    found = registry.find("m")
    assert (found.state, found.reason) == (
        ModelState.UNAVAILABLE,
        "its worker crashed three times",
    )


async def test_with_a_switch_new_instances_serve_only_once_it_returns(
    registry: Registry, pool: FakePool
) -> None:
    """A repository change applied in several processes: each loads its new
    instances, then waits at the switch (the others loading theirs) serving the old."""
    await registry.load("m", [version("m", "1")])
    switch = asyncio.Event()
    reached = asyncio.Event()

    async def wait_for_the_others() -> None:
        reached.set()
        await switch.wait()

    reloading = asyncio.create_task(
        registry.load("m", [version("m", "1"), version("m", "2")], wait_for_the_others)
    )
    await asyncio.wait_for(reached.wait(), 5)  # both new instances are loaded by now
    assert len(pool.loaded) == 3
    assert await served_by(registry, "m", "1") == 1  # the old one still answers
    assert registry.find("m", "2").state is ModelState.LOADING
    assert registry.get_ready("m").version == "1"  # the default stays the served one
    switch.set()
    await reloading
    assert await served_by(registry, "m", "1") == 2
    assert await served_by(registry, "m", "2") == 3
    assert registry.get_ready("m").version == "2"
    assert pool.unloaded == [1]


async def test_a_failed_load_still_reaches_the_switch(registry: Registry, pool: FakePool) -> None:
    """A process whose load failed does not hold the others at the switch."""
    pool.failures[("m", None)] = "corrupt"
    reached: list[bool] = []

    async def arrive() -> None:
        reached.append(True)

    with pytest.raises(ModelError, match="corrupt"):
        await registry.load("m", [version("m")], arrive)
    assert reached == [True]


def batched(name: str) -> ModelSettings:
    """A model no protocol process copies: it batches, and keeps sequences."""
    return model_settings_from_dict(
        {
            "name": name,
            "implementation": "fake.Runtime",
            "max_batch_size": 8,
            "sequence_batching": {},
        },
        None,
    )


def is_copied(settings: ModelSettings) -> bool:
    return settings.max_batch_size <= 1


class ElsewhereCalls:
    """A version answered by another backend: each answer names its instance."""

    def __init__(self, instance_id: int) -> None:
        self.instance_id = instance_id
        self.closed = False
        self.busy = False

    async def submit(self, request: InferenceRequest, context: RequestContext) -> InferenceResponse:
        return InferenceResponse([Tensor("instance", np.array([self.instance_id]))])

    async def stream(self, request: InferenceRequest, context: RequestContext):  # type: ignore[no-untyped-def]
        yield [await self.submit(request, context)]

    async def close(self) -> None:
        self.closed = True


class ElsewhereBackend:
    """Another backend (the model host's, in a protocol process)."""

    where = "elsewhere"

    def __init__(self) -> None:
        self.loaded: dict[int, ModelSettings] = {}
        self.calls: dict[int, ElsewhereCalls] = {}
        self.unloaded: list[int] = []

    async def load(self, instance_id: int, settings: ModelSettings) -> Opened:
        self.loaded[instance_id] = settings
        calls = self.calls[instance_id] = ElsewhereCalls(instance_id)
        instance = LoadedInstance(ModelMetadata(name=settings.name, platform="elsewhere"))
        return Opened(instance, calls, ModelStats(settings.name, settings.version))

    async def unload(self, instance_id: int) -> None:
        self.loaded.pop(instance_id, None)
        self.unloaded.append(instance_id)

    def instances(self, instance_id: int, settings: ModelSettings) -> int:
        return 3

    def control(self, message: Control) -> None:
        """Nothing runs here."""

    async def close(self) -> None:
        """Nothing held."""


async def test_a_model_not_run_here_is_loaded_and_answered_by_the_other_backend() -> None:
    """A protocol process beside a model host: its own models in its pool, dispatched
    here; the others loaded and answered by the other backend, with no dispatch of
    their own here and counted only there."""
    own, elsewhere = FakePool(), ElsewhereBackend()
    stats = ModelStatsTable()
    registry = Registry(own, stats, choice=BackendChoice(here=is_copied, elsewhere=elsewhere))
    await registry.load("plain", [version("plain")])
    await registry.load("batched", [batched("batched")])
    assert [s.name for s in own.loaded.values()] == ["plain"]
    assert [s.name for s in elsewhere.loaded.values()] == ["batched"]
    found = registry.get_ready("batched")
    assert found.settings.max_batch_size == 8  # what metadata and config read
    assert found.scheduler is None and found.cache is None  # nothing queues it here
    assert registry.get_ready("plain").scheduler is not None
    assert await served_by(registry, "batched") == 2 and registry.instances(found) == 3
    assert [entry.name for entry in stats] == ["plain"]  # the host's counts are summed
    await registry.unload("batched")
    assert elsewhere.unloaded == [2] and elsewhere.calls[2].closed and not own.unloaded


async def test_the_model_host_leaves_out_what_the_protocol_processes_copy() -> None:
    pool = FakePool()
    registry = Registry(
        pool, ModelStatsTable(), choice=BackendChoice(here=lambda s: not is_copied(s))
    )
    await registry.load("plain", [version("plain")])
    assert registry.names() == [] and pool.loaded == {}
    with pytest.raises(ModelNotFound):
        registry.find("plain")
    await registry.load("batched", [batched("batched")])
    assert registry.names() == ["batched"]
    # The same name, copied now (its settings changed on disk): the host lets it go.
    await registry.load("batched", [version("batched")])
    assert registry.names() == [] and pool.loaded == {}


class Answers(Model):
    """A runtime the in-process pool of the next test loads (by this module's path)."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(outputs=[])


async def test_the_model_host_runs_a_model_loaded_after_the_start_in_its_own_process() -> None:
    """Placed in the host by a later load (``in_process``): beside the pool's workers,
    in the host's own process, as each protocol process would have run its copy."""
    pool = FakePool()
    later = {"later"}
    choice = BackendChoice(here=lambda s: not is_copied(s), in_process=lambda s: s.name in later)
    registry = Registry(pool, ModelStatsTable(), choice=choice)
    await registry.load("plain", [version("plain")])  # copied, not placed here: left out
    assert registry.names() == []
    implementation = f"{__name__}.{Answers.__name__}"
    settings = model_settings_from_dict({"name": "later", "implementation": implementation}, None)
    await registry.load("later", [settings])
    found = registry.get_ready("later")
    assert found.scheduler is not None and pool.loaded == {}  # not in the pool's workers
    await registry.load("batched", [batched("batched")])
    assert [s.name for s in pool.loaded.values()] == ["batched"]
    await registry.close()
