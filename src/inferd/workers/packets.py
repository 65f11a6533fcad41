"""The fork parents' channel, their clients' side: one pickled tuple a packet.

A fork parent (a model's, ``workers/forkserver.py``; the protocol processes',
``supervisor/protocol_parent.py``) and the process that drives it talk over a UNIX
``SOCK_SEQPACKET`` pair: each message one packet, so no framing; a file descriptor
may travel beside one (a worker's socket, as SCM_RIGHTS). Both clients
(``workers/fork_parent.py`` ``ForkParent``, ``supervisor/protocol_forks.py``
``ProtocolForks``) read their non-blocking end in their event loop with
:func:`receive_packets` and write it with :func:`send_packet`.
"""

from __future__ import annotations

import pickle
import socket
from collections.abc import Callable
from typing import Any


def receive_packets(
    sock: socket.socket, max_message: int, on_message: Callable[[tuple[Any, ...]], None]
) -> bool:
    """Hand every message waiting on ``sock`` (non-blocking) to ``on_message``, in
    order; False once the other end has closed (or the socket failed): the parent
    exited, and nothing more will come."""
    while True:
        try:
            data = sock.recv(max_message)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        on_message(pickle.loads(data))


def send_packet(sock: socket.socket, message: tuple[Any, ...], fd: int | None = None) -> None:
    """Send ``message`` as one packet, with the file descriptor ``fd`` beside it if
    given; OSError if it cannot be sent (the parent is gone, or its buffer is full:
    it has stopped reading)."""
    data = pickle.dumps(message)
    if fd is None:
        sock.send(data)
    else:
        socket.send_fds(sock, [data], [fd])
