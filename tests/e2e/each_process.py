"""Each protocol process of a running server, asked on its own private socket.

A client's connection lands on whichever protocol process the kernel picks; to
see what every one of them serves, a test asks each on its ``rest-<i>.sock``
(server/protocol_role.py: the whole REST app, no access rules), found from the
environment the supervisor started it with. A lone server (one protocol
process) is asked on its public port.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.support.procstat import children, environment
from tests.support.serverproc import ServerProcess


def protocol_sockets(server: ServerProcess) -> list[Path]:
    """The private REST socket of each protocol process (not the model host's), in
    index order; empty for a lone server."""
    found: dict[int, Path] = {}
    for pid in children(server.process.pid):
        started_with = environment(pid)
        if "INFERD_PRIVATE_DIR" not in started_with or "INFERD_MODEL_HOST" in started_with:
            continue
        index = int(started_with["INFERD_PROTOCOL_INDEX"])
        found[index] = Path(started_with["INFERD_PRIVATE_DIR"]) / f"rest-{index}.sock"
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
