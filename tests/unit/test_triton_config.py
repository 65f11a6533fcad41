"""Triton's model configuration derived from model-settings, and load overrides."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor

from inferd.errors import InvalidRequest
from inferd.protocol import pb
from inferd.server.codec_triton import decode_load_request, encode_model_config, load_config
from inferd.settings import ModelSettings
from inferd.triton.config import model_config
from inferd.triton.override import apply_override

TENSORS: dict[str, Any] = {
    "inputs": [
        {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "text", "datatype": "BYTES", "shape": [-1]},
    ],
    "outputs": [{"name": "y", "datatype": "INT64", "shape": [-1, 1]}],
}


LIMIT = 1024  # max_request_size, bytes


def settings(**values: Any) -> ModelSettings:
    model = ModelSettings(name="m", implementation="runtime.Model", **TENSORS, **values)
    model._source = Path("/models/m/model-settings.json")
    return model


def test_without_batching_shapes_stay_and_there_is_no_dynamic_batching() -> None:
    config = model_config(settings(platform="sklearn"), instances=2, server_max_queue_size=50)
    assert config == {
        "name": "m",
        "platform": "sklearn",
        "backend": "runtime.Model",
        "max_batch_size": 0,
        "input": [
            {"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]},
            {"name": "text", "data_type": "TYPE_STRING", "dims": [-1]},
        ],
        "output": [{"name": "y", "data_type": "TYPE_INT64", "dims": [-1, 1]}],
        "instance_group": [{"name": "m", "kind": "KIND_CPU", "count": 2}],
    }


def test_with_batching_dims_lose_the_batch_and_the_queue_is_described() -> None:
    model = settings(
        max_batch_size=8,
        max_batch_time=0.002,
        timeout=1.5,
        default_priority_level=2,
        devices=["cuda:1", "cuda:0"],
    )
    config = model_config(model, instances=1, server_max_queue_size=50)
    assert config["max_batch_size"] == 8
    assert [tensor["dims"] for tensor in config["input"]] == [[4], []]
    assert config["output"][0]["dims"] == [1]
    assert config["instance_group"] == [
        {"name": "m", "kind": "KIND_GPU", "count": 1, "gpus": [1, 0]}
    ]
    assert config["dynamic_batching"] == {
        "preferred_batch_size": [8],
        "max_queue_delay_microseconds": 2000,
        "default_priority_level": 2,
        "default_queue_policy": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 1_500_000,
            "allow_timeout_override": True,
            "max_queue_size": 50,
        },
    }


def test_max_batch_size_one_is_no_batching_as_inferd_reads_it() -> None:
    config = model_config(settings(max_batch_size=1), instances=1, server_max_queue_size=0)
    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config


def test_the_grpc_message_carries_the_same_configuration() -> None:
    warmup = {
        "name": "w",
        "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [4], "zero_data": True}},
    }
    model = settings(max_batch_size=4, max_queue_size=3, model_warmup=[warmup])
    config = model_config(model, instances=3, server_max_queue_size=50)
    message = encode_model_config(config).config
    back = json_format.MessageToDict(message, preserving_proto_field_name=True)
    assert back["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 3
    assert back["instance_group"] == [{"name": "m", "kind": "KIND_CPU", "count": 3}]
    assert back["model_warmup"][0]["inputs"]["x"] == {
        "data_type": "TYPE_FP32",
        "dims": ["4"],
        "zero_data": True,
    }
    assert message.input[0].data_type == pb.TYPE_FP32


def test_a_sequence_batching_block_replaces_dynamic_batching() -> None:
    class WithSequences:
        """What the sequence batching settings look like to the derivation."""

        def __init__(self, base: ModelSettings) -> None:
            self.base = base
            self.sequence_batching = {"max_sequence_idle_microseconds": 5_000_000}

        def __getattr__(self, name: str) -> Any:
            return getattr(self.base, name)

    model: Any = WithSequences(settings(max_batch_size=4))
    config = model_config(model, instances=1, server_max_queue_size=0)
    assert config["sequence_batching"] == {"max_sequence_idle_microseconds": 5_000_000}
    assert "dynamic_batching" not in config


# ---- the proto block matches Triton's field numbers and types ----


def _fields(descriptor: Descriptor) -> dict[str, tuple[int, int, str]]:
    return {
        field.name: (
            field.number,
            field.type,
            field.message_type.name if field.message_type else "",
        )
        for field in descriptor.fields
    }


@pytest.mark.parametrize(
    "name",
    [
        "ModelConfig",
        "ModelInput",
        "ModelOutput",
        "ModelInstanceGroup",
        "ModelDynamicBatching",
        "ModelQueuePolicy",
        "ModelSequenceBatching",
        "ModelWarmup",
        "ModelTensorReshape",
        "ModelVersionPolicy",
        "ModelTransactionPolicy",
        "ModelEnsembling",
        "ModelConfigRequest",
        "ModelConfigResponse",
        "LogSettingsRequest",
        "LogSettingsResponse",
    ],
)
def test_every_field_we_declare_has_tritons_number_and_type(name: str) -> None:
    service_pb2 = pytest.importorskip("tritonclient.grpc.service_pb2")
    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    triton = getattr(model_config_pb2, name, None) or getattr(service_pb2, name)
    ours = getattr(pb, name).DESCRIPTOR
    pairs = [(ours, triton.DESCRIPTOR)]
    while pairs:
        mine, theirs = pairs.pop()
        expected = _fields(theirs)
        assert {key: expected[key] for key in _fields(mine)} == _fields(mine), mine.full_name
        for nested in mine.nested_types:
            pairs.append((nested, theirs.nested_types_by_name[nested.name]))


# ---- load overrides ----


def test_triton_keys_map_onto_the_serving_settings() -> None:
    override = {
        "name": "m",
        "max_batch_size": 16,
        "dynamic_batching": {
            "max_queue_delay_microseconds": 500,
            "preferred_batch_size": [16],
            "default_priority_level": 3,
            "default_queue_policy": {
                "max_queue_size": 7,
                "default_timeout_microseconds": "2000000",
            },
        },
        "instance_group": [{"kind": "KIND_GPU", "count": 2, "gpus": [0]}],
        "model_warmup": [
            {"inputs": {"x": {"data_type": "TYPE_FP32", "dims": [4], "random_data": True}}}
        ],
    }
    changed = apply_override(settings(), json.dumps(override), LIMIT)
    assert (changed.max_batch_size, changed.max_batch_time) == (16, 0.0005)
    assert (changed.default_priority_level, changed.max_queue_size, changed.timeout) == (3, 7, 2.0)
    assert (changed.workers, changed.devices) == (2, ["cuda:0"])
    assert changed.model_warmup[0].inputs["x"].data_type == "FP32"
    # What the model is stays as on disk.
    assert changed.implementation == "runtime.Model" and changed.source == settings().source


def test_model_settings_serving_keys_are_taken_as_they_are() -> None:
    override = {"max_batch_time": 0.01, "threads_per_worker": 2, "retry_on_worker_failure": False}
    changed = apply_override(settings(), json.dumps(override), LIMIT)
    assert changed.max_batch_time == 0.01 and changed.threads_per_worker == 2
    assert changed.retry_on_worker_failure is False


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"implementation": "os.System"}, "may not set 'implementation': it names code or files"),
        ({"parameters": {"uri": "/etc/passwd"}}, "may not set 'parameters'"),
        ({"backend": "python"}, "may not set 'backend'"),
        ({"default_model_filename": "x.py"}, "may not set 'default_model_filename'"),
        ({"input": []}, "may not set 'input'"),
        ({"colour": "red"}, "unknown config key 'colour'"),
        ({"name": "other"}, "the config names model 'other'"),
        ({"max_batch_size": -1}, "max_batch_size"),
        ({"workers": "many"}, "workers"),
        ({"dynamic_batching": {"priority_levels": 3}}, "priority_levels is not supported"),
        ({"dynamic_batching": {"preferred_batch_size": [2, 4]}}, "preferred_batch_size"),
        ({"dynamic_batching": {"max_queue_delay_microseconds": "soon"}}, "must be a number"),
        ({"instance_group": [{"kind": "KIND_GPU"}]}, "lists its gpus"),
        ({"instance_group": [{"count": 1}, {"count": 1}]}, "a list of one group"),
        (
            {"model_warmup": [{"inputs": {"x": {"data_type": "FP32", "input_data_file": "/x"}}}]},
            "input_data_file is not supported",
        ),
        (
            {
                "model_warmup": [
                    {"inputs": {"x": {"data_type": "FP64", "dims": [129], "zero_data": True}}}
                ]
            },
            "warmup input 'x' would be 1032 bytes, over the server's max_request_size (1024)",
        ),
    ],
)
def test_refused_overrides_say_failed_to_load_and_why(override: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        apply_override(settings(), json.dumps(override), LIMIT)
    assert raised.value.message.startswith("failed to load 'm': ")
    assert why in raised.value.message


@pytest.mark.parametrize("config", ["{not json", "[1, 2]", '"text"'])
def test_malformed_config_fails_to_load(config: str) -> None:
    with pytest.raises(InvalidRequest, match="failed to load 'm': the config"):
        apply_override(settings(), config, LIMIT)


def test_load_parameters_refuse_files_and_take_config() -> None:
    assert decode_load_request("m", b"") is None
    assert decode_load_request("m", b"{}") is None
    assert decode_load_request("m", b'{"parameters": {"config": "{}"}}') == "{}"
    with pytest.raises(
        InvalidRequest, match=re.escape("file parameters (file:1/model.py) are refused")
    ):
        decode_load_request("m", b'{"parameters": {"config": "{}", "file:1/model.py": "eA=="}}')
    with pytest.raises(InvalidRequest, match="parameters must be a JSON object"):
        decode_load_request("m", b'{"parameters": null}')
    for config in (b'{"max_batch_size": 2}', b"null"):
        with pytest.raises(InvalidRequest, match="the config parameter must be a string"):
            decode_load_request("m", b'{"parameters": {"config": %s}}' % config)
    with pytest.raises(
        InvalidRequest, match=re.escape("Repository parameters (poll) are not supported")
    ):
        load_config("m", {"poll": True}, ignored=frozenset())


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("A" * 256, "a component of the path is 256 bytes long, over the 255 bytes"),
        ("1/" + "é" * 128, "a component of the path is 256 bytes long"),  # bytes, not characters
        ("", "the path is empty"),
        ("/etc/passwd", "the path is absolute"),
        ("1/../../x", "the path leaves the model's folder (..)"),
    ],
)
def test_an_invalid_file_path_is_named_as_triton_words_it(path: str, problem: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        load_config("m", {"config": "{}", "file:" + path: b"x"}, ignored=frozenset())
    message = raised.value.message
    failed = "failed to load 'm', failed to poll from model repository: "
    assert message.startswith(failed + "Invalid file path 'file:")
    assert problem in message and "File parameters are refused in any case" in message
    assert len(message) < 450  # a long path is cut in the message


def test_a_valid_file_path_is_refused_too_and_long_lists_are_cut() -> None:
    ok = {"config": "{}", "file:1/model.py": b"x", "file:" + "A" * 255: b"x"}
    with pytest.raises(InvalidRequest) as raised:
        load_config("m", ok, ignored=frozenset())
    assert "file parameters (file:1/model.py, 'file:AAA" in raised.value.message
    assert "(260 characters)) are refused" in raised.value.message
    with pytest.raises(
        InvalidRequest, match=re.escape("(p0, p1, p2, p3, p4 and 4 more) are not supported")
    ):
        load_config("m", {f"p{i}": 1 for i in range(9)}, ignored=frozenset())


def test_files_without_a_config_are_refused_saying_triton_needs_one() -> None:
    """Triton loads override files only with a ``config``: the answer says that is
    missing (and that inferd refuses files anyway), worded as Triton's load failure."""
    with pytest.raises(InvalidRequest) as raised:
        load_config("m", {"file:1/model.py": b"x"}, ignored=frozenset())
    message = raised.value.message
    assert message.startswith("failed to load 'm', failed to poll from model repository: ")
    assert "file parameters (file:1/model.py) need a 'config' parameter" in message
    assert "They are refused in any case" in message


def _missing_from_proto(schema: Any, descriptor: Descriptor, path: str) -> list[str]:
    """The fields config.pbtxt may hold (config_schema) that the proto message lacks."""
    missing = []
    for name, spec in schema.items():
        field = descriptor.fields_by_name.get(name)
        if field is None:
            missing.append(path + name)
        elif isinstance(spec.kind, dict) and field.message_type is not None:
            missing += _missing_from_proto(spec.kind, field.message_type, f"{path}{name}.")
    return missing


def test_grpc_model_config_carries_every_field_a_config_pbtxt_may_hold() -> None:
    """gRPC ModelConfig answers what REST's /config does: a field the proto lacks was
    dropped over gRPC (an input's format: Triton's image_client.py refused the model)."""
    from inferd.triton.config_schema import MODEL_CONFIG

    assert _missing_from_proto(MODEL_CONFIG, pb.ModelConfig.DESCRIPTOR, "") == []
