"""Noticing that files changed on disk, cheaply enough to ask on every connection.

TLS certificates (tls.py) and restricted-API keys (access.py) are read again
when their files change: cert-manager and Kubernetes rewrite them in place (a
mounted Secret swaps a symlink), and the server must take the new ones without
a restart. Asking costs a clock read; the files are stat'ed at most once per
interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

# The same signature tells the repository poller that a model's file changed.
from inferd.serving.repository_watch import Signature, stat_signature

CHECK_INTERVAL = 1.0
"""Seconds between two looks at the files: a new key or certificate is in use at most
this long (plus the connection's own time) after it is written."""


class WatchedFiles:
    """Files whose change is noticed by :meth:`changed`."""

    def __init__(
        self,
        paths: Sequence[str],
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``interval``: seconds between looks (default: CHECK_INTERVAL, read now)."""
        self.paths = tuple(paths)
        self._interval = CHECK_INTERVAL if interval is None else interval
        self._clock = clock
        self._next_check = clock() + self._interval
        self._seen = self._signatures()

    def changed(self) -> bool:
        """Whether any of the files changed since the last time this said so (looked
        at no more often than the interval; the first look is one interval after start)."""
        now = self._clock()
        if now < self._next_check:
            return False
        self._next_check = now + self._interval
        signatures = self._signatures()
        if signatures == self._seen:
            return False
        self._seen = signatures
        return True

    def _signatures(self) -> tuple[Signature, ...]:
        return tuple(stat_signature(path) for path in self.paths)
