"""The coordinator (coordinator.py) served on the supervisor's ``coordinator.sock``.

One path, ``COORDINATOR_PATH``, whose POST body is a message of
supervisor/messages.py: a server-wide operation, or one of the coordinator's own
requests. This is where what the coordinator settled becomes the HTTP answer the
forwarding process reads (supervisor/forwarding.py): a value, or a refusal with
the REST status it carries.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferd.errors import InvalidRequest, StatusError
from inferd.host.on_demand import HostOnDemand
from inferd.server.protocol_role import MSGPACK
from inferd.serving.operations import ReadStatistics, encode, refusal_of
from inferd.supervisor.coordinator import Answered, Coordinator
from inferd.supervisor.merging import NO_PROCESS
from inferd.supervisor.messages import (
    CatchUp,
    LoadedAtStart,
    SwitchReached,
    decode_to_coordinator,
)
from inferd.supervisor.outcomes import Applied, NotHeld, Refused
from inferd.supervisor.paths import PrivatePaths

# Where the coordinator takes every message on coordinator.sock.
COORDINATOR_PATH = "/coordinator"


def _response(answered: Answered) -> Response:
    """What the client gets, as the forwarding process reads it: a value (200), or a
    refusal with the REST status it carries (503 when no process answered; a
    protocol process's "no such model" is its refusal)."""
    match answered:
        case Applied(_, value):
            return _value(value)
        case Refused(_, refusal) | NotHeld(_, refusal):
            return Response(encode(refusal), refusal.status, media_type=MSGPACK)
        case _:
            refusal = refusal_of(StatusError(NO_PROCESS, 503), 503)
            return Response(encode(refusal), 503, media_type=MSGPACK)


def _value(value: Any) -> Response:
    return Response(encode(value), 200, media_type=MSGPACK)


def build_coordinator_app(
    paths: PrivatePaths, count: int, host: bool = False, on_demand: HostOnDemand | None = None
) -> Starlette:
    """The coordinator of protocol processes 0..count-1 (their sockets in ``paths``)
    and of the model host (from the start with ``host``, else when ``on_demand``
    starts it), as an ASGI app; ``app.state.coordinator`` holds its journal."""
    return coordinator_app(Coordinator(paths, count, host, on_demand))


def coordinator_app(coordinator: Coordinator) -> Starlette:
    """``coordinator`` served as an ASGI app (``app.state.coordinator``): one path,
    ``COORDINATOR_PATH``, whose POST body is a message of supervisor/messages.py."""

    async def take(request: Request) -> Response:
        try:
            message = decode_to_coordinator(await request.body())
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            refused = InvalidRequest(f"Not a message to the coordinator: {error}")
            return Response(encode(refusal_of(refused, 400)), 400, media_type=MSGPACK)
        match message:
            case ReadStatistics():
                return _response(await coordinator.statistics(message))
            case CatchUp(index):
                return _value(await coordinator.catch_up(index))
            case LoadedAtStart(index):
                await coordinator.loaded(index)
                return _value(None)
            case SwitchReached(number, index):
                await coordinator.switch(number, index)
                return _value(None)
            case _:
                return _response(await coordinator.apply(message))

    app = Starlette(routes=[Route(COORDINATOR_PATH, take, methods=["POST"])])
    app.state.coordinator = coordinator
    return app
