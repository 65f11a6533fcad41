"""The bound on a model version's interleaved streams.

Streams of an async-generator ``predict_stream`` hold no worker slot (they run
interleaved on an event loop), so the slot count does not bound them: this does,
with ``max_concurrent_streams``. Past it a new stream is refused at once (503
with Retry-After) rather than queued: what it waits for is other streams ending,
which may take minutes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from inferd.errors import Overloaded
from inferd.settings import ModelSettings
from inferd.workers.base import ResponseStream

# The model setting's default, for a scheduler built without settings (tests).
DEFAULT_MAX_STREAMS: int = ModelSettings.model_fields["max_concurrent_streams"].default


class StreamLimit:
    def __init__(
        self, settings: ModelSettings | None, label: str, on_ended: Callable[[], None]
    ) -> None:
        self.limit = settings.max_concurrent_streams if settings else DEFAULT_MAX_STREAMS
        self.open = 0
        self._label = label
        self._on_ended = on_ended

    def check(self) -> None:
        """Overloaded if no more stream may start now."""
        if self.open >= self.limit:
            raise Overloaded(
                f"Too many streams: {self._label} has {self.open} open, its "
                "max_concurrent_streams; retry later, or raise max_concurrent_streams in "
                "its model-settings.json"
            )

    def started(self, responses: ResponseStream) -> ResponseStream:
        """Count ``responses`` as open until it has finished."""
        self.open += 1
        responses.finished.add_done_callback(self._ended)
        return responses

    def _ended(self, finished: asyncio.Future[None]) -> None:
        self.open -= 1
        self._on_ended()
