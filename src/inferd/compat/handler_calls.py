"""Running an MLModel's ``@custom_handler`` method for a handler call.

MLServer lets FastAPI fill a handler's arguments; inferd fills the common cases
the same way: a parameter with a ``Body(...)`` default, or annotated with a dict,
a list or a pydantic model, gets the JSON body (a pydantic model validated);
a ``Header(...)`` default gets the request header of its name (``_`` read as
``-``); any other parameter gets the query parameter of its name, converted to
its annotation (``int``, ``float``, ``bool``, ``str``), else its default. The
return value is sent as JSON (a pydantic model dumped), or, for a Starlette
``Response``, as its body, status and media type.
"""

from __future__ import annotations

import inspect
import json
import typing
import urllib.parse
from collections.abc import Callable
from typing import Any

from inferd.custom_calls import JSON, HandlerCall, handler_response
from inferd.errors import InvalidRequest
from inferd.types import InferenceResponse

_BODY_TYPES = (dict, list)


async def call_handler(method: Callable[..., Any], call: HandlerCall) -> InferenceResponse:
    arguments = _arguments(method, call)
    result = method(**arguments)
    if inspect.isawaitable(result):
        result = await result
    return _answer(result)


def _arguments(method: Callable[..., Any], call: HandlerCall) -> dict[str, Any]:
    hints = _type_hints(method)
    query = dict(urllib.parse.parse_qsl(call.query))
    arguments: dict[str, Any] = {}
    for name, parameter in inspect.signature(method).parameters.items():
        hint = hints.get(name, parameter.annotation)
        marker = type(parameter.default).__name__
        if marker == "Body" or _is_body_type(hint):
            arguments[name] = _body(call.body, hint)
        elif marker == "Header":
            header = call.headers.get(name.replace("_", "-").lower())
            arguments[name] = header if header is not None else _marker_default(parameter)
        elif name in query:
            arguments[name] = _convert(query[name], hint, name)
        elif parameter.default is not inspect.Parameter.empty:
            arguments[name] = _marker_default(parameter)
        else:
            raise InvalidRequest(f"Missing query parameter {name!r}")
    return arguments


def _type_hints(method: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(method)
    except Exception:  # unresolvable annotations: use them as written
        return {}


def _is_body_type(hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    return (isinstance(origin, type) and issubclass(origin, _BODY_TYPES)) or hasattr(
        hint, "model_validate"
    )


def _body(body: bytes, hint: Any) -> Any:
    try:
        value = json.loads(body) if body else None
    except ValueError as error:
        raise InvalidRequest(f"The request body is not JSON: {error}") from None
    return hint.model_validate(value) if hasattr(hint, "model_validate") else value


def _marker_default(parameter: inspect.Parameter) -> Any:
    """A plain default, or the default held by a FastAPI ``Body``/``Header``/``Query``."""
    default = parameter.default
    held = getattr(default, "default", default)
    return None if held is Ellipsis or repr(held) == "PydanticUndefined" else held


def _convert(text: str, hint: Any, name: str) -> Any:
    if hint is bool:
        return text.lower() in ("1", "true", "yes", "on")
    if hint in (int, float):
        try:
            return hint(text)
        except ValueError:
            raise InvalidRequest(
                f"Query parameter {name!r}: {text!r} is not {hint.__name__}"
            ) from None
    return text


def _answer(result: Any) -> InferenceResponse:
    if hasattr(result, "status_code") and hasattr(result, "body"):  # a Starlette Response
        media_type = getattr(result, "media_type", None) or JSON
        return handler_response(bytes(result.body), int(result.status_code), media_type)
    if hasattr(result, "model_dump_json"):
        return handler_response(result.model_dump_json().encode())
    return handler_response(json.dumps(result, default=_plain, separators=(",", ":")).encode())


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")
