"""The fork parents' channel, their clients' side (workers/packets.py)."""

from __future__ import annotations

import os
import socket

from inferd.workers.packets import receive_packets, send_packet


def test_every_waiting_message_is_handed_on_in_order_then_the_close_is_seen() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    received: list[tuple[object, ...]] = []
    try:
        assert receive_packets(ours, 1 << 16, received.append)  # nothing yet: still open
        send_packet(theirs, ("READY", 1, ["m"]))
        send_packet(theirs, ("FORKED", 2, 4242))
        assert receive_packets(ours, 1 << 16, received.append)
        assert received == [("READY", 1, ["m"]), ("FORKED", 2, 4242)]
        theirs.close()
        assert not receive_packets(ours, 1 << 16, received.append)  # the parent exited
    finally:
        ours.close()
        theirs.close()


def test_a_file_descriptor_travels_beside_a_message() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    try:
        send_packet(ours, ("FORK", 7), write_end)
        data, fds, _, _ = socket.recv_fds(theirs, 1 << 16, 1)
        assert len(fds) == 1
        os.write(fds[0], b"x")
        os.close(fds[0])
        assert os.read(read_end, 1) == b"x" and data
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        ours.close()
        theirs.close()
