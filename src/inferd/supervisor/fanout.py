"""One HTTP request sent to each protocol process's private socket, answers gathered.

What the supervisor reads of every process over HTTP, on unix sockets only these
processes can open (see ``paths.py``): its readiness poll (each ``rest-<i>.sock``'s
health) and its metrics endpoint (each ``metrics-<i>.sock``'s exposition). httpx
carries it (its transport speaks HTTP over a unix socket). The coordinator's
operations travel in ipc frames instead (workers/private_calls.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

# A private request's host: any name does, the socket decides where it goes.
_BASE_URL = "http://inferd.internal"


@dataclass(frozen=True)
class Answer:
    """One process's answer; ``error`` says why there is none (status 0)."""

    socket: Path
    status: int
    headers: Mapping[str, str]
    body: bytes
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


async def send(
    socket: Path,
    method: str,
    path: str,
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> Answer:
    """``method path`` on one process's socket (``timeout_s`` None: no limit, for
    loads that take as long as the model takes)."""
    # Plain HTTP on a private socket: no TLS, so no certificates to load (the default
    # context loads them for every transport, 17 ms: most of a forwarded operation).
    transport = httpx.AsyncHTTPTransport(uds=str(socket), verify=False)
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url=_BASE_URL, timeout=timeout_s
        ) as client:
            response = await client.request(method, path, content=content, headers=headers)
    except httpx.HTTPError as error:
        return Answer(socket, 0, {}, b"", f"{type(error).__name__}: {error}")
    return Answer(socket, response.status_code, response.headers, response.content)


async def fan_out(
    sockets: Sequence[Path],
    method: str,
    path: str,
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> list[Answer]:
    """The same request to every socket at once; answers in the sockets' order."""
    return list(
        await asyncio.gather(
            *(send(socket, method, path, content, headers, timeout_s) for socket in sockets)
        )
    )
