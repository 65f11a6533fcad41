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

from tests.support.procstat import environment, served_by
from tests.support.serverproc import ServerProcess


def protocol_sockets(server: ServerProcess) -> list[Path]:
    """The private REST socket of each protocol process (not the model host's), in
    index order; empty for a lone server. A forked protocol process's environment
    as /proc shows it is its fork parent's (set before the fork): the folder is read
    from any process's, the indices are those of the processes not the host."""
    folders: set[str] = set()
    hosts = 0
    pids = served_by(server.process.pid)
    for pid in pids:
        started_with = environment(pid)
        if "INFERD_PRIVATE_DIR" in started_with:
            folders.add(started_with["INFERD_PRIVATE_DIR"])
        if started_with.get("INFERD_MODEL_HOST") in ("start", "later"):
            hosts += 1
    if not folders:
        return []
    (folder,) = folders
    return [Path(folder) / f"rest-{index}.sock" for index in range(len(pids) - hosts)]


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
