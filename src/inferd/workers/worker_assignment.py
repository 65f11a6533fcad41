"""Where the process pool puts things: which workers hold a model, which one runs a call.

The pool's record of each loaded instance (:class:`Instance`), the workers a
new instance is loaded into (the live ones holding the fewest models), the
worker a call goes to (the least loaded holder with a free slot) or an
interleaved stream (the holder with the fewest open streams), and the rules for
workers that die (:class:`RestartPolicy`).

A request naming a sequence (Triton's ``sequence_id``) of a model without
sequence batching goes to the holder its id picks, whether it came alone or over
a stream: a stateful runtime then finds each sequence where it started, as it
would in Triton's one instance, whatever the number of workers. (A model with
sequence batching names its sequence's holder in the call itself.)
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from inferd.settings import ModelSettings
from inferd.types import InferenceRequest
from inferd.workers.process import WorkerProcess

logger = logging.getLogger(__name__)

# Delay before restarting a worker, by how many times in a row it died young.
RESTART_BACKOFF = (0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 5.0)
# A worker that served this long before dying is restarted without delay.
STABLE_AFTER = 30.0
# An instance whose load crashes a worker this many times in a row is dropped there.
MAX_LOAD_CRASHES = 3
# Longest a request whose worker died waits for a free slot to be sent again (a
# restart and the reload of its model included), in seconds.
RETRY_WAIT = 30.0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a dead worker starts again, and when a worker gives up on an instance."""

    backoff: tuple[float, ...] = RESTART_BACKOFF
    stable_after: float = STABLE_AFTER
    max_load_crashes: int = MAX_LOAD_CRASHES
    retry_wait: float = RETRY_WAIT

    def delay(self, quick_deaths: int) -> float:
        """Seconds to wait before restarting a worker that died young this many times."""
        return self.backoff[min(quick_deaths, len(self.backoff) - 1)]


DEFAULT_RESTART_POLICY = RestartPolicy()  # frozen: safe to share


@dataclass(slots=True, eq=False)
class Instance:
    """A loaded model instance: the workers holding it and what the pool knows of it."""

    settings: ModelSettings
    holders: list[WorkerProcess]
    capacity: int = 0
    listeners: list[Callable[[], None]] = field(default_factory=list)
    load_crashes: dict[int, int] = field(default_factory=dict)
    failed: str = ""  # why no worker serves it any more
    interleaved_streams: bool = False  # its predict_stream is an async generator
    # Its settings with retries off, for sequence requests that have a timeout (made once).
    sequence_settings: ModelSettings | None = None

    @property
    def name(self) -> str:
        return self.settings.name


def choose_holders(
    settings: ModelSettings,
    alive: list[WorkerProcess],
    workers: int,
    instances: Iterable[Instance],
) -> list[WorkerProcess]:
    """The live workers to load a new instance into: as many as its settings ask
    (all ``workers`` by default), those holding the fewest models first."""
    wanted = settings.workers or workers
    if wanted > workers:
        logger.warning(
            "Model %r asks for %d workers but the server has %d; it is loaded in all",
            settings.name,
            wanted,
            workers,
        )
    loaded = list(instances)

    def models_held(worker: WorkerProcess) -> int:
        return sum(worker in instance.holders for instance in loaded)

    return sorted(alive, key=lambda worker: (models_held(worker), worker.index))[:wanted]


def pick(
    instance_id: int, instance: Instance, request: InferenceRequest | None = None
) -> WorkerProcess | None:
    """The worker the request's sequence goes to, if it names one and that worker
    serves; else the least loaded live worker holding the instance, with a free slot
    if any has."""
    if request is not None and request.parameters:
        worker = _sequence_holder(instance_id, instance, request)
        if worker is not None:
            return worker
    best: WorkerProcess | None = None
    best_free = False
    for worker in instance.holders:
        if not worker.serves(instance_id):
            continue
        free = worker.free_slots(instance_id) > 0
        if (
            best is None
            or (free and not best_free)
            or (free == best_free and worker.outstanding < best.outstanding)
        ):
            best, best_free = worker, free
    return best


def pick_for_stream(
    instance_id: int, instance: Instance, request: InferenceRequest
) -> WorkerProcess | None:
    """The worker the request's sequence goes to, if it names one and that worker
    serves; else the live worker holding the instance with the fewest open
    interleaved streams."""
    if request.parameters:
        worker = _sequence_holder(instance_id, instance, request)
        if worker is not None:
            return worker
    serving = [worker for worker in instance.holders if worker.serves(instance_id)]
    return min(serving, key=lambda worker: worker.open_streams, default=None)


def _sequence_holder(
    instance_id: int, instance: Instance, request: InferenceRequest
) -> WorkerProcess | None:
    """The holder the request's ``sequence_id`` picks among all the instance's holders
    (live or not, so a death moves only the sequences of the worker that died); None
    if it names no sequence or that holder does not serve now (its state is gone:
    anywhere will do). Whole numbers go round the holders (ids 1000 and 1001 differ),
    strings by their CRC-32. The call may wait there for a slot, as a sequence's does."""
    sequence_id = request.parameters.get("sequence_id")
    if not sequence_id or not instance.holders:
        return None
    is_number = isinstance(sequence_id, int)
    spread = sequence_id if is_number else zlib.crc32(str(sequence_id).encode())
    worker = instance.holders[spread % len(instance.holders)]
    return worker if worker.serves(instance_id) else None
