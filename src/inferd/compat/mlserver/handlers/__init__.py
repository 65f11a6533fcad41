"""MLServer's ``mlserver.handlers.custom_handler``: extra REST routes served by a
model's own methods.

``@custom_handler(rest_path="/my-route", rest_method="POST")`` marks an ``async``
method of an ``MLModel``; inferd serves it on the REST port, running it where the
model lives (in the server process, or in the worker that holds the model).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_HANDLER_ATTRIBUTE = "__custom_handler__"


@dataclass(frozen=True)
class CustomHandler:
    rest_path: str
    rest_method: str = "POST"


def custom_handler(rest_path: str, rest_method: str = "POST") -> Callable[[Any], Any]:
    def mark(method: Any) -> Any:
        register_custom_handler(CustomHandler(rest_path, rest_method), method)
        return method

    return mark


def register_custom_handler(handler: CustomHandler, method: Any) -> None:
    setattr(method, _HANDLER_ATTRIBUTE, handler)


def get_custom_handlers(model: Any) -> list[tuple[CustomHandler, Any]]:
    """The model's marked methods, bound, with their routes."""
    found = []
    for _, member in inspect.getmembers(model):
        handler = getattr(member, _HANDLER_ATTRIBUTE, None)
        if isinstance(handler, CustomHandler):
            found.append((handler, member))
    return found


__all__ = ["CustomHandler", "custom_handler", "get_custom_handlers", "register_custom_handler"]
