"""The books the pool dispatches on, for one worker process.

Which instances it serves and with how many slots (``threads_per_worker``), its
requests in flight (per instance and in all), and the instances to load again
after a restart, in the order they were loaded. A stream of a plain generator
counts as a request in flight (a busy slot) until it has finished. Each rule
about these counts lives here once; the worker process updates them as its
calls start and end, and empties them when it dies.
"""

from __future__ import annotations

import contextlib


class SlotBook:
    """Slots and requests in flight per instance, and the reload list, of one worker."""

    def __init__(self) -> None:
        # Instances loaded and serving here, each with its slots.
        self.serving_slots: dict[int, int] = {}
        # Requests in flight, per instance and in all.
        self._busy: dict[int, int] = {}
        self.outstanding = 0
        # Instances to load again after a restart, in the order they were loaded.
        self._to_reload: list[int] = []

    def serving(self, instance_id: int, slots: int) -> None:
        """The instance is loaded here with ``slots``; no longer one to reload."""
        self.serving_slots[instance_id] = slots
        self.cancel_reload(instance_id)

    def forget(self, instance_id: int) -> bool:
        """Serve the instance no more; whether it was served."""
        return self.serving_slots.pop(instance_id, None) is not None

    def slots(self, instance_id: int) -> int:
        return self.serving_slots.get(instance_id, 0)

    def free_slots(self, instance_id: int) -> int:
        return self.serving_slots.get(instance_id, 0) - self._busy.get(instance_id, 0)

    def started(self, instance_id: int) -> bool:
        """One more request in flight; whether it is the only one (the worker was idle)."""
        self.outstanding += 1
        self._busy[instance_id] = self._busy.get(instance_id, 0) + 1
        return self.outstanding == 1

    def finished(self, instance_id: int) -> bool:
        """One request fewer in flight; whether none is left (the worker is idle)."""
        self.outstanding -= 1
        self._busy[instance_id] -= 1
        return not self.outstanding

    def lost_all(self) -> None:
        """The process died: what it served is to be loaded again once it restarts."""
        self._to_reload += [i for i in self.serving_slots if i not in self._to_reload]
        self.serving_slots.clear()

    def reload_later(self, instance_id: int) -> None:
        """Load the instance again after the next restart (it died as it loaded)."""
        if instance_id not in self._to_reload:
            self._to_reload.append(instance_id)

    def next_to_reload(self) -> int | None:
        return self._to_reload[0] if self._to_reload else None

    def cancel_reload(self, instance_id: int) -> None:
        with contextlib.suppress(ValueError):
            self._to_reload.remove(instance_id)
