"""What a protocol process sends the supervisor's coordinator: a server-wide
operation (serving/operations.py), or one of the coordinator's own requests below,
each a typed message in one tagged union, msgpack on the wire."""

from __future__ import annotations

import msgspec

from inferd.serving.operations import AnyOperation


class CoordinatorRequest(msgspec.Struct, frozen=True, tag_field="op", tag=True):
    """A request about the processes themselves, not an operation they apply."""


class CatchUp(CoordinatorRequest, frozen=True, tag=True):
    """Process ``index`` starts: replay the journal to it; answered with how many
    operations it applied and those it refused."""

    index: int


class LoadedAtStart(CoordinatorRequest, frozen=True, tag=True):
    """Process ``index`` has loaded its start-up models; answered once every one has."""

    index: int


class SwitchReached(CoordinatorRequest, frozen=True, tag=True):
    """Process ``index`` has loaded what repository reload ``number`` brings; answered
    once every protocol process has (the switch barrier)."""

    number: int
    index: int


ToCoordinator = AnyOperation | CatchUp | LoadedAtStart | SwitchReached
_decoder = msgspec.msgpack.Decoder(ToCoordinator)


def decode_to_coordinator(data: bytes) -> ToCoordinator:
    """The message ``data`` encodes; msgspec.DecodeError or ValidationError if none."""
    return _decoder.decode(data)
