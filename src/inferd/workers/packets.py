"""The fork parents' channel: its messages, one class each, and their carrier.

A fork parent (a model's, ``workers/forkserver.py``; the protocol processes',
``supervisor/protocol_parent.py``) and the process that drives it (its client:
``workers/fork_parent.py`` ``ForkParent``, ``supervisor/protocol_forks.py``
``ProtocolForks``) talk over a UNIX ``SOCK_SEQPACKET`` pair. Each message is one
packet holding one frame of :mod:`inferd.workers.ipc`, the encoding of the worker
and model host channels; a packet keeps its bounds, so no stream decoder is
needed, and a file descriptor (a worker's socket) travels beside the message that
needs it, as ``SCM_RIGHTS``.

A message is its class's instance, pickled as it is: the reader matches it by
class. The worker channel sends tuples instead, for speed (messages.py); here a
few messages go by per fork, which costs milliseconds, and the class look-up
microseconds. What travels (docs/design.md "Private channels"):

- main process -> a model's fork parent: :class:`LoadModel` (answered
  :class:`Loaded`, :class:`LoadFailed` or :class:`Unforkable`), then
  :class:`ForkWorker`, the worker's socket beside it;
- supervisor -> the protocol fork parent: :class:`ForkProtocol`; the parent says
  :class:`Ready` unasked once it has loaded the copied models;
- a fork is answered :class:`Forked` or :class:`ForkFailed`, with its token.

A parent's exit is no message: its client reads end-of-file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, get_args

from inferd.workers import ipc

if TYPE_CHECKING:
    from inferd.settings import ModelSettings, ServerSettings

logger = logging.getLogger(__name__)

# The largest message (a packet): settings, an environment, an error: a few KiB.
MAX_MESSAGE = 1 << 20


@dataclass(slots=True)
class LoadModel:
    """Import and load the model, to fork its workers from (once, first)."""

    sys_path: list[str]  # the main process's import path; empty: keep the parent's own
    server: ServerSettings
    settings: ModelSettings


@dataclass(slots=True)
class Loaded:
    """The model is loaded: workers can be forked from the parent (its pid)."""

    pid: int


@dataclass(slots=True)
class LoadFailed:
    """The model's load raised this error."""

    error: ipc.WireError


@dataclass(slots=True)
class Unforkable:
    """The model loaded, but forking the parent is not safe now: why (each worker loads
    the model instead)."""

    why: str


@dataclass(slots=True)
class ForkWorker:
    """Fork a worker serving the socket that travels beside this message."""

    token: int  # names the answer


@dataclass(slots=True)
class Ready:
    """The protocol fork parent (its pid) loaded the copied models (their labels)."""

    pid: int
    labels: list[str]


@dataclass(slots=True)
class ForkProtocol:
    """Fork a protocol process with this whole environment (its index, restart flag,
    the supervisor's private folder)."""

    token: int  # names the answer
    environment: dict[str, str]


@dataclass(slots=True)
class Forked:
    """The child of the fork ``token`` asked for runs as ``pid`` (adopted by the asker)."""

    token: int
    pid: int


@dataclass(slots=True)
class ForkFailed:
    """The fork ``token`` asked for was not made: why."""

    token: int
    why: str


Message = (
    LoadModel
    | Loaded
    | LoadFailed
    | Unforkable
    | ForkWorker
    | Ready
    | ForkProtocol
    | Forked
    | ForkFailed
)
MESSAGES: tuple[type[Message], ...] = get_args(Message)


def send(sock: socket.socket, message: Message, fd: int | None = None) -> None:
    """Send ``message`` as one packet, with the file descriptor ``fd`` beside it if
    given; OSError if it cannot be sent (the other end is gone, or its buffer is
    full: it has stopped reading)."""
    socket.send_fds(sock, ipc.encode(message), [] if fd is None else [fd])


def receive(sock: socket.socket) -> tuple[Message, list[int]] | None:
    """The next message and the file descriptors that came with it (the caller's to
    close); None once the other end has closed. Blocks on a blocking ``sock``;
    BlockingIOError on a non-blocking one with nothing waiting. ipc.ProtocolError
    for a packet that is not a message of this channel (its descriptors closed)."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
    if not data:
        close_all(fds)
        return None
    try:
        if flags & socket.MSG_TRUNC:
            raise ipc.ProtocolError(f"a packet larger than {MAX_MESSAGE} bytes")
        message = ipc.decode_frame(data)
        if not isinstance(message, MESSAGES):
            raise ipc.ProtocolError(f"{type(message).__name__} is no fork parent's message")
    except ipc.ProtocolError:
        close_all(fds)
        raise
    return message, fds


def receive_waiting(sock: socket.socket, on_message: Callable[[Message], None]) -> bool:
    """Hand every message waiting on ``sock`` (non-blocking: a client's, in its event
    loop) to ``on_message``, in order; False once the other end has closed (or the
    socket failed, or sent what is no message): the parent exited, or must be
    taken for gone, and nothing more will come."""
    while True:
        try:
            received = receive(sock)
        except BlockingIOError:
            return True
        except ipc.ProtocolError:
            logger.exception("A fork parent sent what is no message: taken for gone")
            return False
        except OSError:
            return False
        if received is None:
            return False
        message, fds = received
        close_all(fds)  # no fork parent sends any
        on_message(message)


def close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
