"""The tools' HTTP/1.1 client against a real socket: keep-alive, chunks, closes, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from inferd.tools.leanhttp import LeanHttpConnection
from inferd.tools.v2client import Endpoint, Reply, http_post
from tests.support.serverproc import free_port

pytestmark = pytest.mark.anyio

ANSWERS = {
    b"/json": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
    b"/chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    b"2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
    b"/close": b"HTTP/1.1 503 X\r\nretry-after: 2\r\nconnection: close\r\n"
    b"content-length: 0\r\n\r\n",
}


class Server:
    """Answers each request by its path; counts the connections it accepted."""

    def __init__(self) -> None:
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while b"connection: close" not in (answer := await self._answer(reader)):
                writer.write(answer)
            writer.write(answer)
        except asyncio.IncompleteReadError:  # the client closed its connection
            pass
        writer.close()

    @staticmethod
    async def _answer(reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r")[0]))
        return ANSWERS[head.split(b" ")[1]]


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Endpoint]]:
    server = Server()
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    yield server, Endpoint("127.0.0.1", port)
    listening.close()


async def exchanges(endpoint: Endpoint, *paths: str) -> list[Reply]:
    """The answers to a POST of ``{}`` to each path, in turn on one LeanHttpConnection."""
    connection = LeanHttpConnection(endpoint, timeout_s=5)
    replies = [await connection.exchange(http_post(endpoint, path, b"{}")) for path in paths]
    await connection.close()
    return replies


async def test_answers_come_back_whole_on_one_kept_alive_connection(
    served: tuple[Server, Endpoint],
) -> None:
    server, endpoint = served
    json, chunked = await exchanges(endpoint, "/json", "/chunked")
    assert (json.status, json.body, chunked.status, chunked.body) == (200, b"{}", 200, b"abc")
    assert server.connections == 1


async def test_after_connection_close_the_next_exchange_reconnects(
    served: tuple[Server, Endpoint],
) -> None:
    server, endpoint = served
    refused, answered = await exchanges(endpoint, "/close", "/json")
    assert (refused.status, refused.retry_after, refused.close, answered.ok) == (
        503,
        2.0,
        True,
        True,
    )
    assert server.connections == 2


async def test_no_server_is_an_answer_of_status_0_that_says_why() -> None:
    with_nobody = Endpoint("127.0.0.1", free_port())
    reply = await LeanHttpConnection(with_nobody, timeout_s=5).exchange(b"GET / HTTP/1.1\r\n\r\n")
    assert reply.status == 0 and not reply.ok and reply.retryable
    assert "ConnectionRefusedError" in reply.error
