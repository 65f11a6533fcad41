"""What a worker's process is to the main process: a pid to signal and an exit to wait for.

A worker spawned by the main process is a ``subprocess.Popen``; one forked from a
model's fork parent (``fork_workers``) is adopted by the main process and reaped
there (:class:`inferd.workers.adoption.AdoptedChild`). Both fit this protocol.
"""

from __future__ import annotations

from typing import Any, Protocol


class ProcessHandle(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> Any:
        """None while it runs; then its exit code, or minus the signal that killed it."""

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...
