"""``python -m benchmarks scale``'s ``mlp``: issue 27's GPU MLP stood in for on CPUs, its
options, its request, and its written runtime's answer and cost (no server)."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from benchmarks.scale.fleet import grpc_values, rest_values
from benchmarks.scale.mlp import BATCHING, FEATURES, IMPLEMENTATION, MODULE_FILE, OUTPUTS
from benchmarks.scale.models import build_models, mlp_model
from benchmarks.scale.options import parse
from inferd.types import Tensor
from tests.unit.runtime_helpers import load, model_settings, request


def written_runtime(repo: Path, call_ms: float, row_ms: float) -> ModuleType:
    """The mlp's runtime module as the server imports it from its model folder."""
    mlp_model(call_ms, row_ms).write(repo, repo / "device.lock")
    spec = importlib.util.spec_from_file_location("mlp", repo / "mlp" / MODULE_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_options_take_mlp_and_its_costs_but_default_to_light_and_heavy() -> None:
    assert parse([], available=[0, 1]).models == ("light", "heavy")
    parsed = parse(["--models", "mlp", "--mlp-call-ms", "2", "--mlp-row-ms", "0.5"], [0, 1])
    assert (parsed.models, parsed.mlp_call_ms, parsed.mlp_row_ms) == (("mlp",), 2.0, 0.5)
    defaults = parse(["--models", "mlp"], available=[0, 1])
    assert (defaults.mlp_call_ms, defaults.mlp_row_ms) == (1.0, 0.02)
    with pytest.raises(SystemExit):
        parse(["--mlp-call-ms", "-1"], available=[0, 1])


def test_the_issue_s_old_layout_runs_without_replicas() -> None:
    """Two workers behind one protocol process, and the default beside it; --replicas
    alone measures no replicas (a batched model's replicas are not the comparison)."""
    argv = ["--models", "mlp", "--workers", "2", "--protocol-processes", "1", "default",
            "--replicas"]  # fmt: skip
    parsed = parse(argv, available=[0, 1])
    labels = [layout.label for layout in parsed.layouts]
    assert labels == ["1 x 2 protocol_processes=1", "1 x 2"]
    assert not any(layout.replicas for layout in parsed.layouts)
    assert parsed.layouts[0].settings_json() == {"parallel_workers": 2, "protocol_processes": 1}


def test_a_request_is_one_row_of_2048_numbers_over_both_protocols() -> None:
    from inferd.protocol import pb

    model = mlp_model(1.0, 0.02)
    (tensor,) = json.loads(model.rest_body())["inputs"]
    assert (tensor["shape"], tensor["datatype"], len(tensor["data"])) == ([1, 2048], "FP32", 2048)
    assert len(model.rest_body()) > 15_000  # the JSON the protocol process must decode
    message = pb.ModelInferRequest.FromString(model.grpc_message())
    assert list(message.inputs[0].shape) == [1, FEATURES]
    assert len(message.inputs[0].contents.fp32_contents) == FEATURES
    assert model.describe().startswith("mlp: GPU-like MLP") and "1.02 ms on the device" in (
        model.describe()
    )


def test_the_written_model_batches_as_the_issue_says(tmp_path: Path) -> None:
    mlp_model(1.0, 0.02).write(tmp_path, tmp_path / "device.lock")
    settings = json.loads((tmp_path / "mlp" / "model-settings.json").read_text())
    assert settings["implementation"] == IMPLEMENTATION
    assert {key: settings[key] for key in BATCHING} == {"max_batch_size": 32,
                                                        "max_batch_time": 0.002}  # fmt: skip


def test_the_runtime_answers_what_the_benchmark_expects_in_any_batch(tmp_path: Path) -> None:
    model = mlp_model(1.0, 0.02)
    runtime = written_runtime(tmp_path, 1.0, 0.02)
    assert (tmp_path / "device.lock").resolve() == runtime.LOCK  # the layout's one device
    loaded = load(runtime.Mlp, model_settings(tmp_path / "mlp", IMPLEMENTATION))
    row = np.asarray([model.row], dtype=np.float32)
    (alone,) = loaded.predict(request(Tensor("input-0", row))).outputs
    assert alone.name == "y" and alone.data.shape == (1, OUTPUTS)
    assert model.matches(alone.data.ravel().tolist())
    assert alone.data.ravel().tolist() == list(model.expected)  # exact: a max of the inputs
    # In a batch of 32 other rows around it, the row's answer is the same bytes.
    batch = np.random.default_rng(1).standard_normal((32, FEATURES)).astype(np.float32)
    batch[17] = row[0]
    (batched,) = loaded.predict(request(Tensor("input-0", batch))).outputs
    assert batched.data[17].tobytes() == alone.data[0].tobytes()
    assert not model.matches(batched.data[0].tolist())


def test_the_runtime_holds_the_device_a_call_plus_its_rows(tmp_path: Path) -> None:
    runtime = written_runtime(tmp_path, call_ms=20, row_ms=2)
    loaded = load(runtime.Mlp, model_settings(tmp_path / "mlp", IMPLEMENTATION))
    rows = np.zeros((10, FEATURES), dtype=np.float32)
    began = time.perf_counter()
    loaded.predict(request(Tensor("input-0", rows)))
    assert time.perf_counter() - began >= 0.020 + 10 * 0.002


def test_answers_are_read_from_rest_and_grpc_bodies() -> None:
    from inferd.protocol import pb

    model = mlp_model(1.0, 0.02)
    rest = {"outputs": [{"name": "y", "datatype": "FP32", "data": list(model.expected)}]}
    assert model.matches(rest_values(json.dumps(rest).encode()) or [])
    assert rest_values(b'{"error": "no"}') is None
    raw = pb.ModelInferResponse(raw_output_contents=[np.float32(model.expected).tobytes()])
    raw.outputs.add(name="y", datatype="FP32", shape=[1, OUTPUTS])
    assert model.matches(grpc_values(raw.SerializeToString()) or [])
    typed = pb.ModelInferResponse()
    typed.outputs.add(name="y", datatype="INT64", shape=[1]).contents.int64_contents.append(2)
    assert grpc_values(typed.SerializeToString()) == [2.0]
    assert grpc_values(pb.ModelInferResponse().SerializeToString()) is None


def test_sklearn_models_expect_their_class() -> None:
    (light,) = build_models(["light"], heavy_trees=1)
    assert light.expected == (0.0,) and light.matches([0]) and not light.matches([1])
    assert not light.matches([0, 0])
