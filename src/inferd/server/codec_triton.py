"""Wire forms of Triton's extensions: load parameters, model config, log settings.

REST and gRPC read a load's parameters the same way (:func:`load_config`): the
``config`` parameter is the JSON override (inferd.triton.override); ``file:*``
parameters, which would write files into the model's folder, are refused, worded
as Triton's load failures (``failed to load '<name>', failed to poll from model
repository: ...``; a path that could name no file: ``Invalid file path``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from google.protobuf import json_format

from inferd.errors import LOAD_POLL_FAILED, InvalidRequest
from inferd.json_refusals import not_json_reason
from inferd.protocol import pb

FILE_PARAMETER = "file:"
# The longest file name (one path component) a file system takes, in bytes (NAME_MAX).
NAME_MAX = 255
# How much of a name the client chose an error repeats, and how many such names:
# an answer must not grow with what the client sent (gRPC carries it in a header).
SHOWN_CHARACTERS = 64
SHOWN_NAMES = 5
NO_FILES = (
    "a client may not write files into the model repository; put the model's "
    "files in its folder on the server"
)


def load_config(name: str, parameters: Mapping[str, Any], ignored: frozenset[str]) -> str | None:
    """The ``config`` override among a load's ``parameters`` (None: none given).

    ``ignored``: parameters that are accepted and have no effect; any other one is
    refused (REST passes every name it does not know here as ignored)."""
    files = sorted(key for key in parameters if key.startswith(FILE_PARAMETER))
    if files:
        raise _files_refused(name, files, with_config="config" in parameters)
    unsupported = sorted(set(parameters) - ignored - {"config"})
    if unsupported:
        raise InvalidRequest(
            f"Repository parameters ({_listed(unsupported)}) are not supported; "
            "a load takes only 'config' (a JSON configuration override)"
        )
    config = parameters.get("config")
    if "config" in parameters and not isinstance(config, str):
        raise InvalidRequest(f"failed to load '{name}': the config parameter must be a string")
    return config


def _files_refused(name: str, files: list[str], with_config: bool) -> InvalidRequest:
    """Why the load's ``file:`` parameters are refused, worded as Triton's load
    failures (tritonclient's examples match the start): the first path that could
    not name a file (Triton's ``Invalid file path``), else files without the
    ``config`` Triton requires with them, else that inferd writes no client's files."""
    failed = LOAD_POLL_FAILED.format(name=name)
    for key in files:
        problem = _path_problem(key.removeprefix(FILE_PARAMETER))
        if problem:
            return InvalidRequest(
                f"{failed}: Invalid file path {_shown(key)}: {problem}. "
                f"File parameters are refused in any case: {NO_FILES}"
            )
    if not with_config:
        return InvalidRequest(
            f"{failed}: file parameters ({_listed(files)}) need a 'config' parameter, "
            "the configuration of the model the files make up (as Triton requires). "
            f"They are refused in any case: {NO_FILES}"
        )
    return InvalidRequest(f"{failed}: file parameters ({_listed(files)}) are refused: {NO_FILES}")


def _path_problem(path: str) -> str | None:
    """What makes ``path`` (relative to the model's folder) name no file; None: nothing."""
    if not path:
        return "the path is empty"
    if path.startswith("/"):
        return "the path is absolute; a model's files are named relative to its folder"
    for part in path.split("/"):
        if part == "..":
            return "the path leaves the model's folder (..)"
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > NAME_MAX:
            return (
                f"a component of the path is {size} bytes long, over the {NAME_MAX} bytes "
                "a file name may have (NAME_MAX)"
            )
    return None


def _shown(key: str) -> str:
    """``key`` quoted, cut to SHOWN_CHARACTERS (saying how long it was)."""
    if len(key) <= SHOWN_CHARACTERS:
        return repr(key)
    return f"{key[:SHOWN_CHARACTERS]!r}... ({len(key)} characters)"


def _listed(keys: list[str]) -> str:
    shown = ", ".join(
        key if len(key) <= SHOWN_CHARACTERS else _shown(key) for key in keys[:SHOWN_NAMES]
    )
    more = len(keys) - SHOWN_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def decode_load_request(name: str, body: bytes) -> str | None:
    """The ``config`` of a REST load body (``{"parameters": {"config": "<JSON>"}}``)."""
    if not body.strip():
        return None
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise InvalidRequest(f"failed to load '{name}': {not_json_reason(body, error)}") from None
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
        raise InvalidRequest(not_json_reason(body, error, "The log settings")) from None
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
