"""The serving end of a channel, shared by a worker process and the model host's edge.

A :class:`CommandServer` turns each received frame back into its
:class:`~inferd.workers.messages.Command`, hands it to the handler its subclass
gave for that class, and encodes the replies. A command it has no handler for,
or whose fields do not fit, is answered with an error and the connection reads
on. How replies leave (a worker's blocking socket under a lock, the host's
transport once a loop turn) is the subclass's :meth:`send`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from inferd.errors import ConfigurationError, InferdError, ModelError
from inferd.workers import ipc, messages
from inferd.workers.messages import Command

logger = logging.getLogger(__name__)

Handler = Callable[[int, int, Any], None]
"""(call_id, instance_id, the command): runs it, or starts it and replies later."""


class CommandServer:
    """Commands in, replies out; subclasses say what each command does and how to send."""

    def __init__(self, handlers: dict[type[Command], Handler]) -> None:
        # By wire kind, with the class to rebuild: one dict lookup per command.
        self._handlers = {cls.KIND: (cls, handler) for cls, handler in handlers.items()}

    def describe(self) -> str:
        """Who answers, for error messages: "Worker 3", "The model host"."""
        raise NotImplementedError

    def send(self, pieces: list[ipc.Buffer]) -> None:
        raise NotImplementedError

    def handle(self, wire: messages.WireCommand) -> None:
        """Run one received command (the tuple its frame decoded to)."""
        # The common case inline (a call per command less than messages.decode's),
        # anything else through decode, which says what is wrong.
        entry = self._handlers.get(wire[0]) if type(wire) is tuple and len(wire) > 2 else None
        if entry is None:
            self._refuse(wire)
            return
        cls, handler = entry
        try:
            command = cls(*wire[3:])
        except TypeError:
            self._refuse(wire)
            return
        try:
            handler(wire[1], wire[2], command)
        except Exception as error:  # fields of the wrong type: answer it, read on
            bad = f"{self.describe()} got a bad {cls.__name__}: {error!r}"
            self.reply_error(wire[1], ModelError(bad))

    def _refuse(self, wire: Any) -> None:
        """Answer a command this server cannot run with why."""
        try:
            call_id, _, command = messages.decode(wire)
        except ValueError as error:
            call_id = wire[1] if type(wire) is tuple and len(wire) > 1 else -1
            self.reply_error(call_id, ModelError(f"{self.describe()} got {error}"))
            return
        name = type(command).__name__
        self.reply_error(call_id, ModelError(f"{self.describe()} does not take {name}"))

    def reply(self, call_id: int, result: Any) -> None:
        try:
            pieces = messages.encode_reply(messages.RESULT, call_id, result)
        except Exception as error:
            message = f"{self.describe()} cannot send the result back: {error}"
            self.reply_error(call_id, ModelError(message))
            return
        self.send(pieces)

    def reply_error(self, call_id: int, error: BaseException) -> None:
        if not isinstance(error, InferdError | ConfigurationError):
            logger.error("%s: %s", self.describe(), error, exc_info=error)
        self.send(messages.encode_reply(messages.ERROR, call_id, ipc.error_to_wire(error)))
