"""The credit pump both event-loop streams use (workers/stream_credit.py)."""

from __future__ import annotations

import asyncio

import pytest

from inferd.workers.stream_credit import CreditPump

pytestmark = pytest.mark.anyio


class Source:
    """``pull`` gives [0], [1], ... up to ``count``; ``hang_at``: waits there forever."""

    def __init__(self, count: int, hang_at: int | None = None) -> None:
        self.count = count
        self.hang_at = hang_at
        self.pulled = 0
        self.sent: list[int] = []

    async def pull(self) -> list[int]:
        if self.pulled == self.count:
            raise StopAsyncIteration
        if self.pulled == self.hang_at:
            await asyncio.Event().wait()
        self.pulled += 1
        return [self.pulled - 1]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_it_sends_no_further_than_its_credit_and_goes_on_at_a_grant() -> None:
    source, credit = Source(5), CreditPump[int](2)
    pumping = asyncio.ensure_future(credit.pump(source.pull, source.sent.extend, False))
    await settle()
    assert source.sent == [0, 1] and source.pulled == 2 and not pumping.done()
    credit.grant(10)
    await pumping
    assert source.sent == [0, 1, 2, 3, 4] and credit.credit == 7


async def test_a_stop_ends_a_pump_waiting_for_credit() -> None:
    source, credit = Source(5), CreditPump[int](1)
    pumping = asyncio.ensure_future(credit.pump(source.pull, source.sent.extend, False))
    await settle()
    assert credit.stop() and not credit.stop()  # the second: stopped already
    await pumping
    assert source.sent == [0]


async def hanging_pump(interruptible: bool) -> tuple[Source, asyncio.Future[None]]:
    """A pump that sent one and awaits its next, stopped."""
    source, credit = Source(5, hang_at=1), CreditPump[int](10)
    pumping = asyncio.ensure_future(credit.pump(source.pull, source.sent.extend, interruptible))
    await settle()
    credit.stop()
    await settle()
    return source, pumping


async def test_an_interruptible_pump_is_cancelled_where_it_awaits_the_next() -> None:
    source, pumping = await hanging_pump(interruptible=True)
    with pytest.raises(asyncio.CancelledError):
        await pumping
    assert source.sent == [0]


async def test_a_pump_that_is_not_interruptible_only_sees_the_flag() -> None:
    _, pumping = await hanging_pump(interruptible=False)
    assert not pumping.done()  # its source is stopped by its owner (LocalStream.cancel)
    pumping.cancel()
