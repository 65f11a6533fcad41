"""The DataPlane with the in-process pool: inference, statistics, the repository."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import InvalidRequest, ModelNotFound
from inferd.server.app import InferenceServer
from inferd.serving.repository_index import NOT_LOADED
from inferd.types import InferenceRequest, ModelState, RequestedOutput, Tensor
from tests.support.models import write_model_folder

from .conftest import RUNTIMES, StartServer

pytestmark = pytest.mark.anyio


def one_input(*values: float, name: str = "t") -> InferenceRequest:
    return InferenceRequest(inputs=[Tensor(name, np.array(values, dtype=np.float32))], id="q")


async def test_infer_stamps_the_answer_with_the_model_and_request(inferd: InferenceServer) -> None:
    answer = await inferd.dataplane.infer("versioned", "1", one_input(1.0, 2.0))
    assert (answer.model_name, answer.model_version, answer.id) == ("versioned", "1", "q")
    assert answer.outputs[0].data.tolist() == [1.0, 2.0]
    default = await inferd.dataplane.infer("versioned", None, one_input(1.0))
    assert default.model_version == "2"


async def test_infer_keeps_only_the_outputs_asked_for(inferd: InferenceServer) -> None:
    request = InferenceRequest(
        inputs=[Tensor("a", np.ones(1)), Tensor("b", np.zeros(1))],
        outputs=[RequestedOutput("b")],
    )
    answer = await inferd.dataplane.infer("echo", None, request)
    assert [tensor.name for tensor in answer.outputs] == ["b"]
    request.outputs = [RequestedOutput("c")]
    with pytest.raises(InvalidRequest, match="no output named 'c'; it returned \\['a', 'b'\\]"):
        await inferd.dataplane.infer("echo", None, request)


async def test_statistics_count_successes_and_failures(inferd: InferenceServer) -> None:
    dataplane = inferd.dataplane
    await dataplane.infer("echo", None, one_input(1.0))
    await dataplane.infer("echo", None, one_input(2.0))
    with pytest.raises(Exception, match="this model always fails"):
        await dataplane.infer("fails", None, one_input(1.0))
    (echo,) = dataplane.statistics("echo")
    assert (echo.success_count, echo.fail_count, echo.inference_count) == (2, 0, 2)
    (fails,) = dataplane.statistics("fails")
    assert (fails.success_count, fails.fail_count) == (0, 1)
    names = [(stats.name, stats.version) for stats in dataplane.statistics()]
    assert names == sorted(names) and ("versioned", "1") in names
    assert [s.version for s in dataplane.statistics("versioned", "2")] == ["2"]
    with pytest.raises(ModelNotFound):
        dataplane.statistics("nope")


async def test_index_lists_loaded_models_and_those_only_on_disk(
    inferd: InferenceServer, repository: Path
) -> None:
    write_model_folder(repository, "later", f"{RUNTIMES}.Echo")
    (repository / "broken").mkdir()
    (repository / "broken" / "model-settings.json").write_text("{not json")
    entries = {(e.name, e.version): (e.state, e.reason) for e in inferd.dataplane.index()}
    assert entries[("echo", None)] == (ModelState.READY, "")
    assert entries[("versioned", "1")] == (ModelState.READY, "")
    assert entries[("later", None)] == (ModelState.UNAVAILABLE, NOT_LOADED)
    state, reason = entries[("broken", None)]
    assert state is ModelState.UNAVAILABLE and "model-settings.json" in reason
    ready = {entry.name for entry in inferd.dataplane.index(ready=True)}
    assert "echo" in ready and "later" not in ready
    assert {entry.name for entry in inferd.dataplane.index(ready=False)} == {
        "later",
        "broken",
    }


async def test_load_and_unload_follow_the_disk(inferd: InferenceServer, repository: Path) -> None:
    dataplane = inferd.dataplane
    with pytest.raises(ModelNotFound):
        await dataplane.infer("later", None, one_input(1.0))
    write_model_folder(repository, "later", f"{RUNTIMES}.Echo")
    await dataplane.load("later")
    assert dataplane.model_ready("later")
    assert (await dataplane.infer("later", None, one_input(3.0))).outputs[0].data.tolist() == [3.0]
    await dataplane.unload("later")
    with pytest.raises(ModelNotFound):
        await dataplane.infer("later", None, one_input(1.0))
    with pytest.raises(ModelNotFound):
        await dataplane.load("nope")


async def test_loading_invalid_settings_is_the_clients_error(
    inferd: InferenceServer, repository: Path
) -> None:
    settings = repository / "echo" / "model-settings.json"
    settings.write_text(json.dumps({"name": "echo", "max_batch_size": -1}))
    with pytest.raises(InvalidRequest, match="max_batch_size"):
        await inferd.dataplane.load("echo")
    assert inferd.dataplane.model_ready("echo"), "the loaded instance keeps serving"


async def test_ready_waits_for_start_up_and_every_model(
    start_inferd: StartServer, repository: Path
) -> None:
    write_model_folder(repository, "broken", "tests.integration.runtimes.NoSuchRuntime")
    server = await start_inferd()
    assert server.dataplane.live()
    assert not server.dataplane.ready()
    assert server.registry.find("broken").state is ModelState.UNAVAILABLE
    await server.dataplane.unload("broken")
    assert server.dataplane.ready()
    server.dataplane.started = False
    assert not server.dataplane.ready()
