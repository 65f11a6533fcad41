"""Running an ``async def predict`` that never awaits without an event loop.

MLServer runtimes write ``async def predict`` because MLServer's API is async,
but most never await anything: they decode, call the model and encode. A worker
process runs async code on its event loop thread, and handing each request to
that thread and back costs more CPU than the adapter's conversions (two thread
wake-ups per request). :func:`never_suspends` tells, once at load, whether a
coroutine function can be run to its end in one step on the calling thread;
:func:`run_to_end` does that step.

The check reads the function's bytecode, conservatively:

- its own code has no suspension point (``await``, ``async for``, ``async with``):
  a coroutine suspends only at those, in its own frame, so it finishes in its
  first step;
- no code in it (nested functions and comprehensions included) names an asyncio
  API that needs a running loop (``asyncio``, ``get_running_loop``,
  ``create_task``...): those would fail, or act on the wrong loop, off the loop.

A function that fails either test runs on the event loop as before. Decorated
functions (``@decode_args``) await the function they wrap: they run on the loop.
"""

from __future__ import annotations

import dis
import inspect
from collections.abc import Coroutine
from types import CodeType
from typing import Any

# The opcodes a coroutine suspends at (await: GET_AWAITABLE + SEND/YIELD_VALUE;
# async for: GET_AITER/GET_ANEXT; async with: BEFORE_ASYNC_WITH).
_SUSPENDING = frozenset(
    {"GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH", "SEND", "YIELD_VALUE"}
)
# Names whose use means the code wants the event loop, even without awaiting.
_LOOP_NAMES = frozenset(
    {
        "asyncio",
        "get_running_loop",
        "get_event_loop",
        "create_task",
        "ensure_future",
        "create_future",
        "run_in_executor",
        "to_thread",
        "call_soon",
        "call_soon_threadsafe",
        "call_later",
        "call_at",
        "run_coroutine_threadsafe",
        "anyio",
        "trio",
    }
)


def never_suspends(function: Any) -> bool:
    """Whether the coroutine function (or bound method) ``function`` always finishes
    in its first step and uses no event-loop API in its own code."""
    plain = getattr(function, "__func__", function)
    code = getattr(plain, "__code__", None)
    if not isinstance(code, CodeType) or not inspect.iscoroutinefunction(plain):
        return False
    if any(instruction.opname in _SUSPENDING for instruction in dis.get_instructions(code)):
        return False
    return not _names_the_loop(code)


def _names_the_loop(code: CodeType) -> bool:
    if _LOOP_NAMES.intersection(code.co_names):
        return True
    return any(_names_the_loop(const) for const in code.co_consts if isinstance(const, CodeType))


def run_to_end(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The result of a coroutine that never suspends, run here in one step."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()  # cannot happen for a function never_suspends() passed
    raise RuntimeError("a coroutine checked to run without suspending suspended")
