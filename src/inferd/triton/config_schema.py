"""What ``config.pbtxt`` may hold, and its JSON form.

The fields here are those of Triton's ``ModelConfig`` that Python-backend models
and ensembles use; a field outside them is a load error naming it (its path, e.g.
``instance_group.profile``), never a silent skip: a setting Triton would act on
and inferd would not must not pass unnoticed. The JSON form is Triton's own
(``model_config.proto`` field names, enums by name, numbers as numbers, maps as
objects): what ``initialize(args)["model_config"]`` and the configuration
endpoint give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferd.errors import ConfigurationError
from inferd.settings.warmup import TRITON_DATATYPES
from inferd.triton.pbtxt import Message, Scalar


@dataclass(frozen=True, slots=True)
class Field:
    """One field: ``kind`` is "str", "int", "bool", "float", "enum" (one of ``enum``),
    "map" (key/value entries, values as ``value``) or a nested schema."""

    kind: str | Schema
    repeated: bool = False
    enum: tuple[str, ...] = ()
    value: Field | None = None


Schema = dict[str, Field]

DATA_TYPES = (*TRITON_DATATYPES, "TYPE_INVALID")
_TENSOR_COMMON: Schema = {
    "name": Field("str"),
    "data_type": Field("enum", enum=DATA_TYPES),
    "dims": Field("int", repeated=True),
    "reshape": Field({"shape": Field("int", repeated=True)}),
    "is_shape_tensor": Field("bool"),
}
INPUT: Schema = {
    **_TENSOR_COMMON,
    "format": Field("enum", enum=("FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW")),
    "allow_ragged_batch": Field("bool"),
    "optional": Field("bool"),
}
OUTPUT: Schema = {**_TENSOR_COMMON, "label_filename": Field("str")}
INSTANCE_GROUP: Schema = {
    "name": Field("str"),
    "kind": Field("enum", enum=("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")),
    "count": Field("int"),
    "gpus": Field("int", repeated=True),
    "passive": Field("bool"),
}
QUEUE_POLICY: Schema = {
    "timeout_action": Field("enum", enum=("REJECT", "DELAY")),
    "default_timeout_microseconds": Field("int"),
    "allow_timeout_override": Field("bool"),
    "max_queue_size": Field("int"),
}
DYNAMIC_BATCHING: Schema = {
    "preferred_batch_size": Field("int", repeated=True),
    "max_queue_delay_microseconds": Field("int"),
    "preserve_ordering": Field("bool"),
    "priority_levels": Field("int"),
    "default_priority_level": Field("int"),
    "default_queue_policy": Field(QUEUE_POLICY),
}
# Triton's sequence batcher: the idle timeout is inferd's; the strategies' blocks are
# accepted and not used (each request of a sequence runs alone, on its holder); control
# inputs and implicit state are not served, so they are load errors.
SEQUENCE_BATCHING: Schema = {
    "max_sequence_idle_microseconds": Field("int"),
    "direct": Field(
        {
            "max_queue_delay_microseconds": Field("int"),
            "minimum_slot_utilization": Field("float"),
        }
    ),
    "oldest": Field(
        {
            "max_candidate_sequences": Field("int"),
            "preferred_batch_size": Field("int", repeated=True),
            "max_queue_delay_microseconds": Field("int"),
            "preserve_ordering": Field("bool"),
        }
    ),
}
STEP: Schema = {
    "model_name": Field("str"),
    "model_version": Field("int"),
    "input_map": Field("map", value=Field("str")),
    "output_map": Field("map", value=Field("str")),
    "model_namespace": Field("str"),
}
VERSION_POLICY: Schema = {
    "latest": Field({"num_versions": Field("int")}),
    "all": Field({}),
    "specific": Field({"versions": Field("int", repeated=True)}),
}
MODEL_CONFIG: Schema = {
    "name": Field("str"),
    "platform": Field("str"),
    "backend": Field("str"),
    "runtime": Field("str"),
    "default_model_filename": Field("str"),
    "max_batch_size": Field("int"),
    "version_policy": Field(VERSION_POLICY),
    "input": Field(INPUT, repeated=True),
    "output": Field(OUTPUT, repeated=True),
    "instance_group": Field(INSTANCE_GROUP, repeated=True),
    "dynamic_batching": Field(DYNAMIC_BATCHING),
    "sequence_batching": Field(SEQUENCE_BATCHING),
    "parameters": Field("map", value=Field({"string_value": Field("str")})),
    "model_transaction_policy": Field({"decoupled": Field("bool")}),
    "ensemble_scheduling": Field({"step": Field(STEP, repeated=True)}),
}


def to_json(message: Message, where: str, schema: Schema = MODEL_CONFIG) -> dict[str, Any]:
    """The JSON form of a parsed ``config.pbtxt``; ConfigurationError naming the field
    (and its line) for a field not understood or a value of the wrong kind."""
    return _message(message, schema, where, "")


def _message(message: Message, schema: Schema, where: str, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in message.fields:
        field_path = f"{path}{name}"
        spec = schema.get(name)
        if spec is None:
            raise ConfigurationError(
                f"{where}: line {value.line}: field {field_path!r} is not supported by inferd's "
                f"Triton model reader (supported here: {', '.join(schema) or 'no fields'})"
            )
        converted = _value(value, spec, where, field_path)
        if spec.kind == "map":
            out.setdefault(name, {}).update(converted)
        elif spec.repeated:
            out.setdefault(name, []).append(converted)
        elif name in out:
            raise ConfigurationError(f"{where}: line {value.line}: {field_path!r} is given twice")
        else:
            out[name] = converted
    return out


def _value(value: Scalar | Message, spec: Field, where: str, path: str) -> Any:
    kind = spec.kind
    if isinstance(kind, dict):
        if not isinstance(value, Message):
            _wrong(value, where, path, "a { ... } block")
        assert isinstance(value, Message)
        return _message(value, kind, where, path + ".")
    if kind == "map":
        assert spec.value is not None
        return _entry(value, spec.value, where, path)
    if not isinstance(value, Scalar):
        _wrong(value, where, path, f"a {kind} value")
    assert isinstance(value, Scalar)
    return _scalar(value, spec, where, path)


def _entry(value: Scalar | Message, spec: Field, where: str, path: str) -> dict[str, Any]:
    if not isinstance(value, Message):
        _wrong(value, where, path, "a { key: ... value: ... } entry")
    assert isinstance(value, Message)
    entry = _message(value, {"key": Field("str"), "value": spec}, where, path + ".")
    if "key" not in entry or "value" not in entry:
        raise ConfigurationError(f"{where}: line {value.line}: {path!r} needs a key and a value")
    return {entry["key"]: entry["value"]}


def _scalar(value: Scalar, spec: Field, where: str, path: str) -> Any:
    text, kind = value.text, spec.kind
    if kind == "str":
        if value.quoted:
            return text
        _wrong(value, where, path, "a quoted string")
    if value.quoted:
        _wrong(value, where, path, f"an unquoted {kind}")
    if kind == "int":
        try:
            return int(text, 0)
        except ValueError:
            _wrong(value, where, path, "a whole number")
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            _wrong(value, where, path, "a number")
    if kind == "bool":
        if text in ("true", "True", "t", "1"):
            return True
        if text in ("false", "False", "f", "0"):
            return False
        _wrong(value, where, path, "true or false")
    if text not in spec.enum:
        _wrong(value, where, path, "one of " + ", ".join(spec.enum))
    return text


def _wrong(value: Scalar | Message, where: str, path: str, expected: str) -> None:
    got = f"{value.text!r}" if isinstance(value, Scalar) else "a { ... } block"
    raise ConfigurationError(f"{where}: line {value.line}: {path!r} must be {expected}, got {got}")
