"""Wire forms of Triton's extensions: load parameters, model config, log settings.

REST and gRPC read a load's parameters the same way (:func:`load_config`): the
``config`` parameter is the JSON override (inferd.triton.override); ``file:*``
parameters, which would write files into the model's folder, are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from google.protobuf import json_format

from inferd.errors import InvalidRequest
from inferd.protocol import pb

FILE_PARAMETER = "file:"


def load_config(name: str, parameters: Mapping[str, Any], ignored: frozenset[str]) -> str | None:
    """The ``config`` override among a load's ``parameters`` (None: none given).

    ``ignored``: parameters that are accepted and have no effect; any other one is
    refused (REST passes every name it does not know here as ignored)."""
    files = sorted(key for key in parameters if key.startswith(FILE_PARAMETER))
    if files:
        raise InvalidRequest(
            f"failed to load '{name}': file parameters ({', '.join(files)}) are refused: "
            "a client may not write files into the model repository; put the model's "
            "files in its folder on the server"
        )
    unsupported = sorted(set(parameters) - ignored - {"config"})
    if unsupported:
        raise InvalidRequest(
            f"Repository parameters ({', '.join(unsupported)}) are not supported; "
            "a load takes only 'config' (a JSON configuration override)"
        )
    config = parameters.get("config")
    if "config" in parameters and not isinstance(config, str):
        raise InvalidRequest(f"failed to load '{name}': the config parameter must be a string")
    return config


def decode_load_request(name: str, body: bytes) -> str | None:
    """The ``config`` of a REST load body (``{"parameters": {"config": "<JSON>"}}``)."""
    if not body.strip():
        return None
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise InvalidRequest(
            f"failed to load '{name}': the body is not valid JSON: {error}"
        ) from None
    if not isinstance(request, dict):
        raise InvalidRequest(f"failed to load '{name}': the body must be a JSON object")
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidRequest(f"failed to load '{name}': parameters must be a JSON object")
    # Other parameters were always ignored over REST: they still are.
    return load_config(name, parameters, ignored=frozenset(parameters))


def decode_log_settings(body: bytes) -> dict[str, Any]:
    """The settings a REST ``POST /v2/logging`` body changes (``{}``: none)."""
    try:
        settings = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise InvalidRequest(f"The log settings are not valid JSON: {error}") from None
    if not isinstance(settings, dict):
        raise InvalidRequest("The log settings must be a JSON object")
    return settings


def encode_model_config(config: dict[str, Any]) -> pb.ModelConfigResponse:
    """Triton's ``ModelConfigResponse``; keys the proto does not carry (inferd's own,
    such as a warmup's inline ``input_data``) stay REST-only."""
    message = json_format.ParseDict(config, pb.ModelConfig(), ignore_unknown_fields=True)
    return pb.ModelConfigResponse(config=message)


def decode_grpc_log_settings(request: pb.LogSettingsRequest) -> dict[str, Any]:
    return {key: _setting_value(value) for key, value in request.settings.items()}


def _setting_value(value: Any) -> Any:
    kind = value.WhichOneof("parameter_choice")
    return None if kind is None else getattr(value, kind)


def encode_grpc_log_settings(settings: dict[str, Any]) -> pb.LogSettingsResponse:
    response = pb.LogSettingsResponse()
    for key, value in settings.items():
        entry = response.settings[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.uint32_param = value
        else:
            entry.string_param = str(value)
    return response
