"""Each protocol process of a running server, asked on its own private socket.

A client's connection lands on whichever protocol process the kernel picks; to
see what every one of them serves, a test asks each on its ``rest-<i>.sock``
(server/protocol_role.py: the whole REST app, no access rules), found from the
environment the supervisor started it with. A lone server (one protocol
process) is asked on its public port.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from tests.support.procstat import is_model_host, served_by, unix_socket_paths
from tests.support.serverproc import ServerProcess

REST_SOCKET = re.compile(r"/rest-(\d+)\.sock$")


def protocol_sockets(server: ServerProcess) -> list[Path]:
    """The private REST socket of each protocol process (not the model host's), in
    index order; empty for a lone server. Found from the sockets the processes hold
    (the environment /proc shows for a forked process is the one it was forked with,
    which may predate the supervisor's private folder): each binds its own."""
    found: dict[int, Path] = {}
    for pid in served_by(server.process.pid):
        if is_model_host(pid):  # it has a REST socket too, and serves no client
            continue
        for path in unix_socket_paths(pid):
            if match := REST_SOCKET.search(path):
                found[int(match[1])] = Path(path)
    return [found[index] for index in sorted(found)]


def ask_each(server: ServerProcess, method: str, path: str, **kwargs: Any) -> list[httpx.Response]:
    """``method path`` answered by every protocol process, in index order."""
    sockets = protocol_sockets(server)
    if not sockets:
        return [httpx.request(method, f"{server.url}{path}", timeout=30, **kwargs)]
    answers = []
    for socket in sockets:
        transport = httpx.HTTPTransport(uds=str(socket))
        with httpx.Client(transport=transport, base_url="http://inferd", timeout=30) as client:
            answers.append(client.request(method, path, **kwargs))
    return answers
