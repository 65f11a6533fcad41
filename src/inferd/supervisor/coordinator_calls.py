"""The coordinator (coordinator.py) served on the supervisor's ``coordinator.sock``.

Each call there (workers/private_calls.py: one message in ipc frames, one reply)
brings a message of supervisor/messages.py: a server-wide operation, or one of the
coordinator's own requests. This is where what the coordinator settled becomes the
reply the forwarding process reads (supervisor/forwarding.py): the value, or the
refusing error as it crosses (server/errors.py ``portable_error``), a 503 when no
process answered.
"""

from __future__ import annotations

from typing import Any

from inferd.errors import InvalidRequest, StatusError
from inferd.server.errors import portable_error
from inferd.serving.operations import Operation, ReadStatistics
from inferd.supervisor.coordinator import Answered, Coordinator
from inferd.supervisor.merging import NO_PROCESS
from inferd.supervisor.messages import CatchUp, LoadedAtStart, SwitchReached
from inferd.supervisor.outcomes import Applied, NotHeld, Refused
from inferd.workers.private_calls import Handler


def coordinator_calls(coordinator: Coordinator) -> Handler:
    """What answers each call on ``coordinator.sock``: a message of
    supervisor/messages.py, taken by ``coordinator``."""

    async def take(message: Any) -> Any:
        match message:
            case ReadStatistics():
                return _value_of(await coordinator.statistics(message))
            case Operation():
                return _value_of(await coordinator.apply(message))
            case CatchUp(index):
                return await coordinator.catch_up(index)
            case LoadedAtStart(index):
                await coordinator.loaded(index)
                return None
            case SwitchReached(number, index):
                await coordinator.switch(number, index)
                return None
            case _:
                name = type(message).__name__
                raise InvalidRequest(f"Not a message to the coordinator: {name}")

    return take


def _value_of(answered: Answered) -> Any:
    """What the client gets, as the forwarding process reads it: the value, or the
    refusal (a protocol process's "no such model" is its refusal), or a 503 when no
    process answered."""
    match answered:
        case Applied(_, value):
            return value
        case Refused(_, error) | NotHeld(_, error):
            raise portable_error(error, "a server-wide operation")
        case _:
            raise StatusError(NO_PROCESS, 503)
