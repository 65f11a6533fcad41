"""What a protocol process sends the supervisor's coordinator: a server-wide
operation (serving/operations.py), or one of the coordinator's own requests below,
each a typed message (its instance in one frame: workers/private_calls.py)."""

from __future__ import annotations

import msgspec


class CoordinatorRequest(msgspec.Struct, frozen=True):
    """A request about the processes themselves, not an operation they apply."""


class CatchUp(CoordinatorRequest, frozen=True):
    """Process ``index`` starts: replay the journal to it; answered with how many
    operations it applied and those it refused."""

    index: int


class LoadedAtStart(CoordinatorRequest, frozen=True):
    """Process ``index`` has loaded its start-up models; answered once every one has."""

    index: int


class SwitchReached(CoordinatorRequest, frozen=True):
    """Process ``index`` has loaded what repository reload ``number`` brings; answered
    once every protocol process has (the switch barrier)."""

    number: int
    index: int
