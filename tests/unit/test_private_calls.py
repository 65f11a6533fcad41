"""A private call (workers/private_calls.py): one message in an ipc frame, one reply,
a connection per call; what a caller gets for a value, a refusal, a bad frame, a
server that is not there or too slow."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidRequest, ModelError, Overloaded
from inferd.workers import ipc, messages
from inferd.workers.private_calls import CallUnanswered, call
from tests.support.private_calls import answering

pytestmark = pytest.mark.anyio


async def echo(message: Any) -> Any:
    return message


async def test_a_value_comes_back_as_it_was_sent(tmp_path: Path) -> None:
    big = np.arange(100_000, dtype=np.float32)  # out-of-band in its frame
    async with answering(tmp_path / "calls.sock", echo) as path:
        assert await call(path, {"a": [1, "b", None]}) == {"a": [1, "b", None]}
        back = await call(path, big)
    assert np.array_equal(back, big) and back.dtype == big.dtype


async def test_a_refusal_comes_back_as_its_class(tmp_path: Path) -> None:
    async def refuse(message: Any) -> Any:
        raise Overloaded(f"busy with {message}", retry_after=2)

    async with answering(tmp_path / "calls.sock", refuse) as path:
        with pytest.raises(Overloaded, match="busy with 7") as raised:
            await call(path, 7)
    assert raised.value.retry_after == 2


async def test_calls_at_once_are_each_answered_on_their_own_connection(tmp_path: Path) -> None:
    async def slow_echo(message: Any) -> Any:
        await asyncio.sleep(0.05 if message == 0 else 0)
        return message

    async with answering(tmp_path / "calls.sock", slow_echo) as path:
        answers = await asyncio.gather(*(call(path, index) for index in range(20)))
    assert answers == list(range(20))


async def test_what_is_no_frame_or_cannot_be_sent_back_is_refused_with_why(
    tmp_path: Path,
) -> None:
    async def unpicklable(message: Any) -> Any:
        return lambda: None

    async with answering(tmp_path / "calls.sock", unpicklable) as path:
        with pytest.raises(ModelError, match="pickle"):
            await call(path, "x")
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b"\x05\x00\x00\x00\x00\x00\x00\x00junk!")
        writer.write_eof()
        kind, _, wire = ipc.decode_frame(await reader.read())
        writer.close()
    assert kind == messages.ERROR
    error = ipc.error_from_wire(wire)
    assert isinstance(error, InvalidRequest) and "Not a message of a private call" in str(error)


async def test_no_server_or_one_too_slow_is_no_answer(tmp_path: Path) -> None:
    with pytest.raises(CallUnanswered, match="FileNotFoundError"):
        await call(tmp_path / "nobody.sock", "x")

    async def never(message: Any) -> Any:
        await asyncio.Event().wait()

    async with answering(tmp_path / "calls.sock", never) as path:
        with pytest.raises(CallUnanswered, match="TimeoutError"):
            await call(path, "x", timeout_s=0.05)


async def test_a_call_is_answered_while_its_handler_waits_on_what_only_it_holds(
    tmp_path: Path,
) -> None:
    """Once the frame is read to end-of-file the event loop no longer watches the
    connection: the server must hold the call's task, or the collector takes it (and
    the future it awaits) mid-call and the caller reads nothing."""
    loop = asyncio.get_running_loop()

    async def waits(message: Any) -> Any:
        done: asyncio.Future[Any] = loop.create_future()
        held = weakref.ref(done)

        def answer() -> None:
            future = held()
            if future is not None:
                future.set_result(message)

        loop.call_later(0.1, answer)
        return await done

    async def collect() -> None:
        await asyncio.sleep(0.03)
        gc.collect()

    async with answering(tmp_path / "calls.sock", waits) as path:
        collector = asyncio.create_task(collect())
        assert await call(path, "kept", timeout_s=5) == "kept"
        await collector
