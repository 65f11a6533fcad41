"""Triton model folders: config.pbtxt's text format, its fields, versions, auto-complete."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from inferd.errors import ConfigurationError
from inferd.serving.repository import ModelRepository
from inferd.triton.config import model_config
from inferd.triton.config_schema import to_json
from inferd.triton.model_folder import read_model
from inferd.triton.override import apply_override
from inferd.triton.pbtxt import parse

FULL = """
name: "m"   # a comment
backend: "python"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "B", data_type: TYPE_STRING, dims: [ -1, 2 ] }
]
output { name: "C" data_type: TYPE_INT64 dims: [ 1 ] }
output: < name: 'D' data_type: TYPE_BOOL dims: 1 >
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 500 preferred_batch_size: [ 2, 4 ] }
parameters { key: "k1" value { string_value: "v1" } }
parameters: { key: "k2", value: { string_value: "v2" } }
model_transaction_policy { decoupled: True }
version_policy: { latest { num_versions: 2 } }
"""

MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def config_of(text: str) -> dict:
    return to_json(parse(text, "config.pbtxt"), "config.pbtxt")


def test_the_text_format_becomes_tritons_json_form() -> None:
    config = config_of(FULL)
    assert config["max_batch_size"] == 8
    assert [tensor["name"] for tensor in config["input"]] == ["A", "B"]
    assert config["input"][1] == {"name": "B", "data_type": "TYPE_STRING", "dims": [-1, 2]}
    assert [tensor["name"] for tensor in config["output"]] == ["C", "D"]
    assert config["output"][1]["dims"] == [1]
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert config["dynamic_batching"]["preferred_batch_size"] == [2, 4]
    assert config["parameters"] == {"k1": {"string_value": "v1"}, "k2": {"string_value": "v2"}}
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert config["version_policy"] == {"latest": {"num_versions": 2}}


def test_ensemble_steps_keep_their_maps() -> None:
    config = config_of(
        'platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" model_version: -1 '
        'input_map { key: "X" value: "IN" } input_map { key: "Z" value: "IN2" } '
        'output_map { key: "Y" value: "OUT" } } ] }'
    )
    (step,) = config["ensemble_scheduling"]["step"]
    assert step["input_map"] == {"X": "IN", "Z": "IN2"}
    assert step["output_map"] == {"Y": "OUT"}
    assert step["model_version"] == -1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("optimization { cuda { graphs: true } }", "field 'optimization' is not supported"),
        ('instance_group [ { profile: "x" } ]', "field 'instance_group.profile'"),
        ("input { name: A }", "'input.name' must be a quoted string"),
        ('input { name: "A" data_type: TYPE_COMPLEX }', "'input.data_type' must be one of"),
        ("max_batch_size: eight", "'max_batch_size' must be a whole number"),
        ('name: "a" name: "b"', "'name' is given twice"),
        ('input { name: "A"', "'}' missing for the block opened on line 1"),
        ("model_transaction_policy { decoupled: maybe }", "must be true or false"),
        ('input { name: "A" } ]', "line 1: a field name expected, got ']'"),
        (
            'sequence_batching { control_input [ { name: "START" } ] }',
            "field 'sequence_batching.control_input' is not supported",
        ),
    ],
)
def test_what_is_not_understood_is_an_error_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")) as error:
        config_of(text)
    assert str(error.value).startswith("config.pbtxt: line ")


def write_model(
    root: Path, name: str, config: str | None, versions: tuple[int, ...] = (1,)
) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    for version in versions:
        (folder / str(version)).mkdir()
        (folder / str(version) / "model.py").write_text(MODEL_PY)
    return folder


def test_a_python_model_becomes_settings_of_its_latest_version(tmp_path: Path) -> None:
    folder = write_model(
        tmp_path, "m", FULL.replace("decoupled: True", "decoupled: false"), (1, 2, 3)
    )
    found = read_model(folder)
    assert [settings.version for settings in found] == ["2", "3"]  # num_versions: 2
    settings = found[-1]
    assert settings.name == "m"
    assert settings.implementation == "inferd.triton.python_backend.runtime.PythonBackendModel"
    assert settings.uri == folder / "3"
    assert settings.max_batch_size == 8 and settings.max_batch_time == pytest.approx(0.0005)
    assert settings.workers == 2
    assert [(t.name, t.datatype, t.shape) for t in settings.inputs] == [
        ("A", "FP32", [-1, 4]),
        ("B", "BYTES", [-1, -1, 2]),
    ]
    assert model_config(settings, 2, 0)["parameters"]["k1"] == {"string_value": "v1"}


def test_sequence_batching_is_tritons_sequence_batcher(tmp_path: Path) -> None:
    config = 'backend: "python" sequence_batching { max_sequence_idle_microseconds: 7 direct {} }'
    (settings,) = read_model(write_model(tmp_path, "m", config))
    assert settings.sequence_batching is not None
    assert settings.sequence_batching.max_sequence_idle_microseconds == 7
    assert settings.sequence_batching.direct == {}


def test_without_dynamic_batching_triton_does_not_batch(tmp_path: Path) -> None:
    folder = write_model(tmp_path, "m", 'backend: "python" max_batch_size: 4')
    (settings,) = read_model(folder)
    assert settings.max_batch_size == 0
    assert settings.version == "1"
    assert settings.workers is None  # one instance (the default): inferd's placement
    assert settings.extra["triton_config"]["instance_group"][0]["count"] == 1


@pytest.mark.parametrize(("batching", "batches"), [("", 0), ("dynamic_batching { }", 16)])
def test_a_load_override_shows_in_the_folders_configuration(
    tmp_path: Path, batching: str, batches: int
) -> None:
    """What get_model_config and initialize(args) read is the override's, and the
    folder batches requests only with dynamic_batching, as when read from the file."""
    text = f'backend: "python" max_batch_size: 8 {batching}'
    (settings,) = read_model(write_model(tmp_path, "m", text))
    override = '{"max_batch_size": "16", "instance_group": [{"count": 2, "kind": "KIND_CPU"}]}'
    changed = apply_override(settings, override, 1 << 20)
    config = changed.extra["triton_config"]
    assert config["max_batch_size"] == 16 and model_config(changed, 2, 0)["max_batch_size"] == 16
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert changed.max_batch_size == batches and changed.workers == 2
    assert settings.extra["triton_config"]["max_batch_size"] == 8  # the file's, untouched


def test_version_policies(tmp_path: Path) -> None:
    every = write_model(tmp_path, "a", "version_policy { all {} }", (1, 2, 10))
    assert [s.version for s in read_model(every)] == ["1", "2", "10"]
    chosen = write_model(tmp_path, "b", "version_policy { specific { versions: [1] } }", (1, 2))
    assert [s.version for s in read_model(chosen)] == ["1"]
    missing = write_model(tmp_path, "c", "version_policy { specific { versions: 7 } }", (1,))
    with pytest.raises(ConfigurationError, match=r"versions \[7\] that have no folder"):
        read_model(missing)


def test_auto_complete_config_fills_in_what_config_pbtxt_leaves_out(tmp_path: Path) -> None:
    folder = write_model(tmp_path, "auto", None)
    (folder / "1" / "model.py").write_text(
        MODEL_PY
        + """
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [3]})
        config.add_output({"name": "Y", "data_type": "TYPE_INT32", "dims": [3]})
        config.set_max_batch_size(4)
        config.set_dynamic_batching()
        config.set_model_transaction_policy({"decoupled": False})
        return config
"""
    )
    (settings,) = read_model(folder)
    assert settings.max_batch_size == 4
    assert [(t.name, t.shape) for t in settings.inputs] == [("X", [-1, 3])]
    assert settings.extra["triton_config"]["name"] == "auto"


def test_auto_complete_may_not_contradict_config_pbtxt(tmp_path: Path) -> None:
    folder = write_model(tmp_path, "auto", 'input { name: "X" data_type: TYPE_FP32 dims: 3 }')
    (folder / "1" / "model.py").write_text(
        MODEL_PY
        + """
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [3]})
        return config
"""
    )
    with pytest.raises(ConfigurationError, match=r"auto_complete_config failed.*data_type"):
        read_model(folder)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('backend: "onnxruntime"', "backend 'onnxruntime' is not served by inferd"),
        ('platform: "tensorflow_savedmodel"', "platform 'tensorflow_savedmodel' is not served"),
        ('name: "other"', "name 'other' differs from its folder's name 'm'"),
        ('platform: "ensemble"', "an ensemble needs ensemble_scheduling.step"),
    ],
)
def test_models_inferd_cannot_serve_say_why(tmp_path: Path, config: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        read_model(write_model(tmp_path, "m", config))


def test_a_folder_without_versions_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "python"')
    with pytest.raises(ConfigurationError, match="no version folder"):
        read_model(tmp_path / "m")


def test_the_repository_serves_triton_folders_and_reports_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_model(tmp_path, "good", 'backend: "python"')
    write_model(tmp_path, "only-code", None)
    write_model(tmp_path, "broken", "no_such_field: 1")
    (tmp_path / "empty" / "stuff").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="inferd.serving.repository"):
        scan = ModelRepository(tmp_path).scan()
    assert sorted(settings.name for settings in scan.models) == ["good", "only-code"]
    (broken,) = scan.broken
    assert broken.folder == "broken" and "'no_such_field' is not supported" in broken.error
    assert "empty holds no model" in caplog.text
    assert "good holds no model" not in caplog.text
