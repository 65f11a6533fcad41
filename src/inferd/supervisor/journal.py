"""What the coordinator has applied server-wide, for a protocol process that starts later.

A protocol process that is restarted (or starts after the others took operations)
begins as the repository and its settings make it: the models loaded at start-up,
the configured log level, no shared memory region. The journal holds the REST
calls that bring it to where the others are, one per key, in the order they were
last applied:

- a model's last load (with its configuration override) or unload, or the last
  change of its folders the repository poll applied (a reload or a removal,
  ``REPOSITORY_CHANGE`` calls): an unload is kept, since a process that loads its
  models at start-up has to unload it again; a load on request (``load_on_request``)
  is not: a process that starts loads such a model on its own first request for
  it, as the others did;
- the log settings in force, as a whole (Triton's fields): each change applies to
  what is in force, so only the last answer says what the changes came to;
- each shared memory region still registered; an unregister forgets the region
  (a process that starts has none), and unregistering every region of a kind
  forgets every one of that kind.

Keys are independent of each other (a model, the logging, a region), so replaying
the last call of each, in the order they were last applied, gives the state the
whole sequence gave.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

import orjson

from inferd.server.protocol_role import REPOSITORY_CHANGE
from inferd.serving.server_wide import load_on_request_of

MODEL = "model"
LOGGING = "logging"
LOGGING_PATH = "/v2/logging"
RELOAD, REMOVE = "reload", "remove"

# The server-wide operations' REST paths (routes.py), as the process sent them: a
# name stays percent-encoded, which is the same for every call naming it.
_API_MODEL_CALL = re.compile(r"/v2/repository/models/[^/]+/(?:load|unload)")
_MODEL_CALL = re.compile(
    r"/v2/repository/models/(?P<name>[^/]+)/(?P<action>load|unload)"
    rf"|{re.escape(REPOSITORY_CHANGE)}/(?P<changed>[^/]+)/(?P<change>{RELOAD}|{REMOVE})"
)
_LOADS = ("load", RELOAD)
_UNLOADS = ("unload", REMOVE)
_REGION_REGISTER = re.compile(
    r"/v2/(?P<kind>system|cuda)sharedmemory/region/(?P<region>[^/]+)/register"
)
_REGION_UNREGISTER = re.compile(
    r"/v2/(?P<kind>system|cuda)sharedmemory/region/(?P<region>[^/]+)/unregister"
)
_KIND_UNREGISTER = re.compile(r"/v2/(?P<kind>system|cuda)sharedmemory/unregister")
_OPERATIONS = (_API_MODEL_CALL, _REGION_REGISTER, _REGION_UNREGISTER, _KIND_UNREGISTER)


@dataclass(frozen=True, slots=True)
class Call:
    """One REST call to a protocol process's private socket."""

    method: str
    path: str
    body: bytes = b""

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


# What a journal entry is about: (MODEL, name), (LOGGING, ""), or (kind, region) with
# kind "system" or "cuda".
Key = tuple[str, str]


def is_server_wide(path: str) -> bool:
    """Whether ``POST path`` is an operation the coordinator applies everywhere."""
    return path == LOGGING_PATH or any(pattern.fullmatch(path) for pattern in _OPERATIONS)


def _model_call(path: str) -> tuple[str, str] | None:
    """The (percent-encoded) model and the action of a call on one model; else None."""
    found = _MODEL_CALL.fullmatch(path)
    if found is None:
        return None
    if found["name"] is not None:
        return found["name"], found["action"]
    return found["changed"], found["change"]


def loads_a_model(path: str) -> bool:
    """A repository API load, or the poll's reload of a changed model."""
    found = _model_call(path)
    return found is not None and found[1] in _LOADS


def unloads_a_model(path: str) -> bool:
    """A repository API unload, or the poll's removal of a model whose folders went."""
    found = _model_call(path)
    return found is not None and found[1] in _UNLOADS


def reloads_from_the_repository(path: str) -> bool:
    """The poll's reload of a changed model (its processes switch at a barrier)."""
    return path.startswith(REPOSITORY_CHANGE) and path.endswith(f"/{RELOAD}")


def loaded_model(call: Call) -> tuple[str, str | None] | None:
    """The model ``call`` loads and its configuration override (the JSON text of a
    load's ``parameters.config``, as forwarding.py sends it); None if it loads none."""
    found = _model_call(call.path)
    if found is None or found[1] not in _LOADS:
        return None
    name, action = found
    config = None
    if action == "load" and call.body:
        try:
            parameters = orjson.loads(call.body).get("parameters") or {}
        except (orjson.JSONDecodeError, AttributeError):
            parameters = {}
        config = parameters.get("config") if isinstance(parameters, dict) else None
    return unquote(name), config if isinstance(config, str) else None


class Journal:
    """The last call applied for each key, oldest first."""

    def __init__(self) -> None:
        self._calls: dict[Key, Call] = {}

    def applied(self, call: Call, answer: bytes) -> None:
        """Note that ``call`` (a server-wide operation) was applied, answering ``answer``."""
        path = call.path
        if path == LOGGING_PATH:
            self._record((LOGGING, ""), Call(call.method, path, answer))
        elif model := _model_call(path):
            if not load_on_request_of(call.body)[0]:  # else loaded again on its own request
                self._record((MODEL, model[0]), call)
        elif found := _REGION_REGISTER.fullmatch(path):
            self._record((found["kind"], found["region"]), call)
        elif found := _REGION_UNREGISTER.fullmatch(path):
            self._calls.pop((found["kind"], found["region"]), None)
        elif found := _KIND_UNREGISTER.fullmatch(path):
            kind = found["kind"]
            for key in [key for key in self._calls if key[0] == kind]:
                del self._calls[key]
        else:
            raise ValueError(f"{call} is not a server-wide operation")

    def calls(self) -> list[Call]:
        """What a process that starts now replays, in order."""
        return list(self._calls.values())

    def _record(self, key: Key, call: Call) -> None:
        """``call`` is now the last for ``key``: it moves after every other."""
        self._calls.pop(key, None)
        self._calls[key] = call
