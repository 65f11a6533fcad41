"""Models loaded on their first request, at most ``max_loaded_models`` of them.

With ``load_on_request`` on, nothing of the repository loads at the start: a request
for a model of the repository that is not loaded loads it (:meth:`OnDemand.using`)
and is answered once it is ready. Concurrent first requests wait on one load (a
task shared by its waiters: one that gives up does not cancel it); a load that fails
answers every waiter with its error, and the next request tries again.

Loaded on request, a model counts against ``max_loaded_models`` (0: no limit). To
load one more past it, the least recently used idle model (no request of it in
flight or queued, no open stream, no live sequence) is unloaded (drained as an
unload is); with none idle, the load waits for a slot up to the request's timeout,
then the request is refused (503 with Retry-After, as one whose load is still
running when its timeout ends: the load goes on for the next request). A model loaded through the
repository API is pinned: never evicted, and not counted against the budget.

With protocol processes, a request's load goes to the coordinator
(``forward``: ``ServerWide.load_on_request``), naming the model the requesting
process would evict for it; the coordinator applies it in every process with
:meth:`OnDemand.load_here`, which evicts the named model (waiting a little for it
to become idle there), else its own least recently used idle one (see
docs/design.md, "Models loaded on request").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TypeVar

from inferd.errors import (
    ConfigurationError,
    ErrorCode,
    InferdError,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
)
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository, RepositoryScan
from inferd.triton.override import failed
from inferd.types import ModelState

logger = logging.getLogger(__name__)

# How long a load waits for a slot when its request sets no timeout (nor its model).
DEFAULT_WAIT_SECONDS = 30.0
# A process applying a load forwarded by the coordinator waits this long for a slot
# (under the coordinator's lock: every server-wide operation waits meanwhile); the
# request that asked for it tries again until its own timeout.
FORWARDED_WAIT_SECONDS = 1.0
# How long a process applying a forwarded load waits for the model it names for
# eviction to become idle here, before it evicts another of its own.
NAMED_WAIT_SECONDS = 0.25
# How long a look at the repository serves the loads on request that follow it:
# reading every model-settings.json costs about 3 ms a model (170 ms for 50 on a
# busy 2-core machine), which every cold request paid twice. A folder added is
# found within this time.
SCAN_SECONDS = 1.0
# How soon a refused client may try again.
RETRY_AFTER_SECONDS = 1.0

# A load on request sent to every process: the model, and the one to evict for it.
Load = Callable[[str, str | None], Awaitable[None]]
T = TypeVar("T")


class OnDemand:
    """The models of one process loaded on request: their recency, their load tasks."""

    def __init__(
        self,
        registry: Registry,
        repository: ModelRepository,
        max_loaded: int = 0,
        load: Load | None = None,
    ) -> None:
        """``load``: how a request's load reaches every process (the coordinator's);
        None: it is applied here alone (:meth:`load_here`)."""
        self.registry = registry
        self.repository = repository
        self.max_loaded = max_loaded
        self.forward = load
        self._recent: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._pinned: set[str] = set()
        self._busy: Counter[str] = Counter()  # requests and streams inside using()
        self._reserved = 0  # slots taken by loads under way, or by evictions draining
        self._loads: dict[str, asyncio.Task[None]] = {}
        self._no_slot: set[str] = set()  # loads waiting for a slot (none was free)
        self._changed = asyncio.Condition()
        self._scan: RepositoryScan | None = None
        self._scanned_at = 0.0
        self.loads: Counter[str] = Counter()  # model_loads_total, by model
        self.evictions: Counter[str] = Counter()  # model_evictions_total, by model

    def join_processes(self, forward: Load | None) -> None:
        """This is one of a supervisor's processes: a request's load goes through
        ``forward`` (to the coordinator, which applies it in every process); None:
        the model host, which loads what it is told and evicts nothing itself."""
        if forward is None:
            self.max_loaded = 0
        else:
            self.forward = forward

    # The request path

    @contextlib.asynccontextmanager
    async def using(
        self, name: str, version: str | None, timeout: float | None
    ) -> AsyncIterator[None]:
        """Around one request (or stream) of ``name``: loads it first if it is not,
        waiting up to ``timeout`` seconds (None: DEFAULT_WAIT_SECONDS); the model
        is busy, not evictable, until the block ends."""
        self._busy[name] += 1
        try:
            if not self._serves(name, version):
                await self._wait_loaded(name, version, timeout or DEFAULT_WAIT_SECONDS)
            if name in self._recent:
                self._recent.move_to_end(name)
            yield
        finally:
            self._busy[name] -= 1
            if not self._busy[name]:
                del self._busy[name]
                if self._no_slot:  # a load waits for a model to become idle
                    await self._notify()

    async def stream(
        self,
        name: str,
        version: str | None,
        timeout: float | None,
        opened: Callable[[], AsyncGenerator[T, None]],
    ) -> AsyncGenerator[T, None]:
        """The stream ``opened`` makes once ``name`` is loaded; busy until it ends."""
        async with self.using(name, version, timeout):
            responses = opened()
            async with contextlib.aclosing(responses):
                async for ready in responses:
                    yield ready

    def to_load(self, name: str, version: str | None) -> bool:
        """Whether a request for ``name`` would load it (it is in the repository, not
        served here)."""
        return not self._serves(name, version) and self._holds(name, version)

    def _holds(self, name: str, version: str | None) -> bool:
        return self.repository.holds(name, version, self._recent_scan())

    def _recent_scan(self) -> RepositoryScan:
        """The repository as it was at most SCAN_SECONDS ago."""
        now = time.monotonic()
        if self._scan is None or now - self._scanned_at > SCAN_SECONDS:
            try:
                self._scan = self.repository.scan()
            except ConfigurationError:
                self._scan = RepositoryScan()  # no readable repository: nothing in it
            self._scanned_at = now
        return self._scan

    def _serves(self, name: str, version: str | None) -> bool:
        try:
            return self.registry.find(name, version).state is ModelState.READY
        except ModelNotFound:
            return False

    async def _wait_loaded(self, name: str, version: str | None, timeout: float) -> None:
        if not self._holds(name, version):
            raise ModelNotFound(name, version)
        started = time.monotonic()
        deadline = started + timeout
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(self._load_task(name, timeout)), timeout)
                return
            except TimeoutError:
                raise self._timed_out(name, time.monotonic() - started) from None
            except Overloaded:
                # The load gave up waiting for a slot at its first waiter's bound: one
                # more try, while this waiter's own bound lasts.
                timeout = deadline - time.monotonic()
                if timeout <= 0.01:
                    raise

    def _load_task(self, name: str, wait: float) -> asyncio.Task[None]:
        """The load of ``name`` under way, or a new one (waiting ``wait`` for a slot)."""
        task = self._loads.get(name)
        if task is None or task.done():
            task = asyncio.create_task(self._load(name, wait), name=f"load {name}")
            self._loads[name] = task
            task.add_done_callback(lambda done: self._load_ended(name, done))
        return task

    def _timed_out(self, name: str, waited: float) -> InferdError:
        if name in self._no_slot:
            return Overloaded(self._full(name), RETRY_AFTER_SECONDS)
        return ModelNotReady(
            f"Model '{name}' is loading for this request and was not ready after "
            f"{waited:.1f}s (the request's timeout); retry later, "
            "or raise its 'timeout' parameter (microseconds)",
            RETRY_AFTER_SECONDS,
        )

    def _load_ended(self, name: str, task: asyncio.Task[None]) -> None:
        self._no_slot.discard(name)
        if self._loads.get(name) is task:
            del self._loads[name]
        if not task.cancelled():
            task.exception()  # its waiters have it; none left must not warn

    async def _load(self, name: str, wait: float) -> None:
        if self.forward is None:
            await self.load_here(name, wait)
            return
        deadline = time.monotonic() + wait
        while True:  # a process that found no slot refused it: the others may have it
            try:
                await self.forward(name, self._victim_for(name))
                return
            except InferdError as error:
                full = error.code is ErrorCode.UNAVAILABLE and error.retry_after is not None
                if not full or time.monotonic() >= deadline:
                    raise
            self._no_slot.add(name)
            await asyncio.sleep(0.05)

    # Applied in each process

    def _victim_for(self, name: str) -> str | None:
        """What this process would evict to load ``name`` now (None: no need, or none
        idle): named in the server-wide load, so that every process evicts the same."""
        if not self.max_loaded or name in self._recent or self._occupied() < self.max_loaded:
            return None
        return self._idle_victim()

    async def load_here(
        self, name: str, wait: float = FORWARDED_WAIT_SECONDS, evict: str | None = None
    ) -> None:
        """Load ``name`` on request in this process, unless it serves it already:
        make room under the budget (evicting ``evict`` first if it is idle here, else
        the least recently used idle model; waiting up to ``wait`` seconds), then load."""
        if name in self._pinned or (name in self._recent and self._serves(name, None)):
            return
        try:
            settings = self.repository.find(name, self._recent_scan())
        except ConfigurationError as error:  # its model-settings.json is broken
            self._scan = None
            raise failed(name, str(error)) from None
        if not settings:
            raise ModelNotFound(name)
        await self._take_slot(name, wait, evict)
        try:
            await self.registry.load(name, settings)
            if name in self.registry.names():  # the model host holds only some models
                self._recent[name] = None
                self.loads[name] += 1
        except InferdError as error:
            self._scan = None  # its next try reads the repository again (fixed, maybe)
            raise _failed_load(name, error) from None
        finally:
            self._reserved -= 1
            await self._notify()

    async def _take_slot(self, name: str, wait: float, evict: str | None = None) -> None:
        """Reserve one of the budget's slots, evicting the least recently used idle
        model if none is free; Overloaded after ``wait`` seconds without one."""
        deadline = time.monotonic() + wait
        named_until = time.monotonic() + min(wait, NAMED_WAIT_SECONDS)
        for gone in set(self._recent) - set(self.registry.names()):  # removed by the poller
            del self._recent[gone]
        async with self._changed:
            try:
                while self.max_loaded and self._occupied() >= self.max_loaded:
                    victim = self._idle_victim(evict)
                    # The one named (by the process that asked) while it may still
                    # become idle here: every process then evicts the same model.
                    named = evict in self._recent and victim != evict
                    if named and time.monotonic() < named_until:
                        victim = None
                    if victim is not None:
                        self._reserved += 1  # the victim's slot, until it has drained
                        await self._evict(victim)
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Overloaded(self._full(name), RETRY_AFTER_SECONDS)
                    self._no_slot.add(name)
                    if named:  # wake when the named one's time is up, to fall back
                        left = min(left, max(named_until - time.monotonic(), 0.001))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), left)
            finally:
                self._no_slot.discard(name)
            self._reserved += 1

    def _occupied(self) -> int:
        return len(self._recent) + self._reserved

    def _idle_victim(self, first: str | None = None) -> str | None:
        """The least recently used idle model (``first`` if it is one of them)."""
        if first is not None and first in self._recent and self._evictable(first):
            return first
        return next((name for name in self._recent if self._evictable(name)), None)

    def _evictable(self, name: str) -> bool:
        return not self._busy[name] and self._idle(name)

    def _idle(self, name: str) -> bool:
        for version in self.registry.versions():
            if version.name == name and version.calls is not None and version.calls.busy:
                return False
        return True

    async def _evict(self, name: str) -> None:
        """Unload ``name`` (holding its slot until it has drained): ``_changed`` is
        released meanwhile, so a request that ends can say so."""
        loaded = len(self._recent) + self._reserved - 1
        del self._recent[name]
        logger.info(
            "Evicted model '%s' (least recently used; %d of %d loaded)",
            name,
            loaded,
            self.max_loaded,
        )
        self.evictions[name] += 1
        self._changed.release()
        try:
            with contextlib.suppress(ModelNotFound):
                await self.registry.unload(name)
        finally:
            await self._changed.acquire()
            self._reserved -= 1

    def _full(self, name: str) -> str:
        return (
            f"Model '{name}' cannot be loaded now: max_loaded_models ({self.max_loaded}) "
            "models are loaded and every one of them is busy; retry later"
        )

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # The repository API

    def pinned(self, name: str) -> None:
        """``name`` was loaded through the repository API: never evicted, not counted."""
        self._pinned.add(name)
        self._recent.pop(name, None)

    def loaded_on_request(self, name: str) -> bool:
        return name in self._recent

    async def unloaded(self, name: str) -> None:
        """``name`` was unloaded (or removed): its slot is free."""
        self._pinned.discard(name)
        if self._recent.pop(name, None) is not None or name in self._loads:
            await self._notify()


def _failed_load(name: str, error: InferdError) -> InferdError:
    """The error worded as a repository load's: ``failed to load '<name>': why``."""
    prefix = f"failed to load '{name}'"
    if not error.message.startswith(prefix):
        error.message = f"{prefix}: {error.message}"
        error.args = (error.message,)
    return error
