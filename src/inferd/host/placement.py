"""Where each model runs when several protocol processes serve (``protocol_processes``
N > 1), decided from what the user configured, and how many processes run.

Each protocol process is a whole server that runs its own copy of a model in
process (``parallel_workers: 0``): no hop, so a light model's throughput grows with
the processes. A model runs once, in the model host, when a copy per process would
break what its settings promise. One rule, the first row that matches wins (the
same table is in docs/design.md "Protocol processes" and docs/every-core.md "Using every
core"); setting -> where the model runs: why.

1. ``parallel_workers`` >= 1 set (settings.json, ``INFERD_PARALLEL_WORKERS``, a flag)
   -> the model host, in its workers: the user asked for worker processes, so a
   crash in predict is a worker's death (retried or 503), not the loss of every
   connection of a protocol process, and model code never holds a protocol
   process's event loop.
2. A model's ``workers`` -> the host: its processes are sized by hand.
3. A cuda device (``devices``, or ``parameters.extra.device``) -> the host: one
   copy of its weights and one CUDA context on the GPU.
4. ``sequence_batching`` -> the host: a sequence's state lives in one copy.
5. ``max_batch_size`` > 1 -> the host: its requests meet in one batcher. A Hugging
   Face ``text-generation`` model with continuous batching (its default) too: its
   streams meet in one engine. So does a vLLM model (``inferd.runtimes.vllm.VLLMModel``,
   a Triton ``backend: "vllm"`` folder): one engine per server.
6. ``inference_timeout`` -> the host: a call is stopped by killing its worker.
7. ``environment_path``/``environment_tarball`` -> the host: it runs in a worker
   of that environment's interpreter.
8. ``cache_enabled`` (the model's and the server's: the cache is on only then) ->
   the host: one response cache answers a repeat whichever process took it.
9. A model's own ``max_queue_size`` > 0 -> the host: its bound holds exactly, in
   one queue.
10. None of these (``parallel_workers`` 0 or left to its default) -> a copy in
    every protocol process, run there: no hop, so a light model's throughput grows
    with the processes. The server's ``max_queue_size`` stays the server's: each
    process lets at most its share wait (:func:`queue_share`: bound // N, at least 1).

That table places the models loaded at start, once: ``inferd start`` applies it
(:meth:`Placement.decide`) and passes the decision to every process of the server
(:class:`Placement`, in the environment), which each reads instead of the rules:
the protocol fork parent, the protocol processes, the model host, the coordinator.
A model loaded after the start
(repository API, repository poll, a request's load of a model the fork parent does
not hold, a reload, a new version) runs in the model host whatever its settings
(:data:`LOADED_LATER`): the coordinator decides it once per load
(host/on_demand.py ``placement``) and marks the load ``hosted``, so every
process places it alike.

The model host (docs/design.md "The model host") is one more process that runs
such models as a lone server would, with the server's worker settings, and serves
them to every protocol process. It starts with the server when a model loaded at
start needs it (:func:`serving_layout`), else the coordinator starts it when a
load first needs it (host/on_demand.py): any model can be loaded at any
time, whatever the layout. With 2 CPUs or fewer and ``protocol_processes`` left to
its default, a start-up model that needs the host makes the server one protocol
process instead (:func:`serving_layout`, :data:`SMALLEST_HOSTING`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from inferd.errors import ConfigurationError
from inferd.runtimes.huggingface_batching import batches_continuously
from inferd.settings import ModelSettings, ServerSettings
from inferd.settings.runtime_names import VLLM

logger = logging.getLogger(__name__)


# Why a model loaded after the start runs in the model host (a copy per protocol
# process would cost its memory N times: only what the fork parent loaded at the
# start is shared copy-on-write by the processes).
LOADED_LATER = (
    "it is loaded after the start (loaded in each protocol process it would be a copy per "
    "process; one copy in the model host serves them all)"
)


def why_not_replicated(model: ModelSettings, server: ServerSettings) -> str | None:
    """Why ``model`` runs once, in the model host, rather than a copy in each protocol
    process of a server with ``server``'s settings; None if it is copied."""
    return _asks_for_workers(model, server) or _one_copy(model) or _server_wide(model, server)


def _asks_for_workers(model: ModelSettings, server: ServerSettings) -> str | None:
    """The user's choice of worker processes: the server's (settings.json or the
    environment; its default of 1 is no choice) or the model's own count."""
    if "parallel_workers" in server.model_fields_set and server.parallel_workers >= 1:
        return (
            f"the server sets parallel_workers: {server.parallel_workers} (its models run "
            "in worker processes)"
        )
    if model.workers is not None:
        return f"it sets workers: {model.workers} (its worker processes are sized by hand)"
    return None


def _one_copy(model: ModelSettings) -> str | None:
    """What must exist once, or needs a worker process, by the model's own settings."""
    cuda = model.cuda_devices
    if cuda:
        return f"it runs on a GPU (devices: {', '.join(cuda)})"
    device = _device_parameter(model)
    if device is not None:
        return f"it runs on a GPU (parameters.extra.device: {device})"
    if model.sequence_batching is not None:
        return "it sets sequence_batching (a sequence's state lives in one process)"
    if model.max_batch_size > 1:
        return (
            f"it batches adaptively (max_batch_size: {model.max_batch_size}): its "
            "concurrent requests must meet in one batcher"
        )
    if batches_continuously(model):
        return (
            "it batches its generations continuously: its concurrent streams must meet in "
            "one engine (parameters.extra.continuous_batching: false copies it instead)"
        )
    if model.implementation == VLLM:
        return (
            "it runs vLLM's engine, which schedules every stream itself: one engine per "
            "server, never a copy per process"
        )
    if model.inference_timeout:
        return "it sets inference_timeout (a call is stopped by killing its worker process)"
    parameters = model.parameters
    if parameters is not None and (parameters.environment_path or parameters.environment_tarball):
        return "it runs in its own Python environment (environment_path/environment_tarball)"
    return None


def _server_wide(model: ModelSettings, server: ServerSettings) -> str | None:
    """What is one for the whole server: its response cache, the model's own bound."""
    if model.cache_enabled and server.cache_enabled:
        return "it sets cache_enabled (one response cache answers every process's repeats)"
    if model.max_queue_size:
        return (
            f"it sets max_queue_size: {model.max_queue_size} (at most that many of its "
            "requests wait in the whole server, in one queue)"
        )
    return None


def queue_share(bound: int, processes: int) -> int:
    """The requests of a copied model one of ``processes`` protocol processes lets
    wait, so that at most ``bound`` (the server's ``max_queue_size``; 0: none) wait
    in the whole server: an even share, at least 1 (a bound below the process count
    lets one wait in each)."""
    if bound == 0 or processes <= 1:
        return bound
    return max(1, bound // processes)


def _device_parameter(model: ModelSettings) -> str | None:
    """A runtime's own device parameter when it names a GPU (Hugging Face's
    ``device``: "cuda", "cuda:1", or a GPU's index), else None."""
    extra = model.parameters.extra if model.parameters is not None else {}
    device = extra.get("device")
    if isinstance(device, str) and device.startswith("cuda"):
        return device
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return str(device)
    return None


# Where inferd start passes its placement to every process of the server.
PLACEMENT_ENV = "INFERD_PLACEMENT"
# A model version: its name and version (None: the model's only one).
Key = tuple[str, str | None]


@dataclass(frozen=True)
class Placement:
    """Where each model loaded at start runs, decided once, by ``inferd start``
    (:meth:`decide`), and passed to every process it starts (:meth:`export`): the
    versions every protocol process copies, and those the model host runs. Each
    process reads it (:meth:`from_environment`) rather than the rules again; what is
    loaded after the start the coordinator places, once per load (on_demand.py)."""

    copied: frozenset[Key] = frozenset()
    hosted: frozenset[Key] = frozenset()

    @classmethod
    def decide(cls, server: ServerSettings, startup_models: Iterable[ModelSettings]) -> Placement:
        """The rules applied to each model loaded at start; logs where each runs and why."""
        copied: set[Key] = set()
        hosted: set[Key] = set()
        for model in startup_models:
            reason = why_not_replicated(model, server)
            label = model.label[:1].upper() + model.label[1:]
            if reason is None:
                logger.info("%s is copied into every protocol process (runs in each)", label)
                copied.add(_key(model))
            else:
                logger.info(
                    "%s runs in the model host, once, for every protocol process: %s",
                    label,
                    reason,
                )
                hosted.add(_key(model))
        return cls(frozenset(copied), frozenset(hosted))

    def copies(self, model: ModelSettings) -> bool:
        """Whether every protocol process loaded ``model`` at start (a copy each)."""
        return _key(model) in self.copied

    def hosts(self, model: ModelSettings) -> bool:
        """Whether the model host runs ``model`` from the start."""
        return _key(model) in self.hosted

    def copied_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.copied)

    def export(self) -> None:
        """Make this the placement the processes started from here read."""
        as_lists = {"copied": sorted(self.copied, key=str), "hosted": sorted(self.hosted, key=str)}
        os.environ[PLACEMENT_ENV] = json.dumps(as_lists)

    @classmethod
    def from_environment(cls) -> Placement:
        """The placement inferd start exported; ConfigurationError when there is none."""
        raw = os.environ.get(PLACEMENT_ENV)
        try:
            data = json.loads(raw or "")
            return cls(_keys(data["copied"]), _keys(data["hosted"]))
        except (ValueError, KeyError, TypeError):
            raise ConfigurationError(
                f"{PLACEMENT_ENV} is not what inferd start sets ({raw!r}): the server's "
                "processes are started by inferd start"
            ) from None


def _key(model: ModelSettings) -> Key:
    return model.name, model.version


def _keys(listed: list[list[str | None]]) -> frozenset[Key]:
    return frozenset((str(name), version) for name, version in listed)


class Layout(NamedTuple):
    """How the server runs: its protocol processes, whether the model host starts
    with them (else when a load first needs it), and its placement."""

    processes: int
    host_at_start: bool
    placement: Placement


# Up to this many CPUs, a hosted model loaded at start with the default
# protocol_processes runs one protocol process instead: on 2 cores the decoding has no
# core to spread to, and the hop to the host cost 0.85 of one process's rate
# (benchmarks/README.md, "Through the model host"). Only the start-up models can
# choose it: once serving, the processes are not changed, and a hosted model
# loaded later starts the host.
SMALLEST_HOSTING = 3


def serving_layout(settings: ServerSettings, startup_models: Iterable[ModelSettings]) -> Layout:
    """How the server runs (one protocol process: a lone server, no placement made)."""
    count = settings.protocol_processes
    if count <= 1:
        return Layout(count, False, Placement())
    placement = Placement.decide(settings, startup_models)
    if not placement.hosted:
        _log_queue_share(settings, count)
        return Layout(count, False, placement)
    if count < SMALLEST_HOSTING and "protocol_processes" not in settings.model_fields_set:
        logger.info(
            "Serving with one protocol process: with %d CPUs the model host would cost "
            "more than the second process brings; set protocol_processes to have both",
            count,
        )
        return Layout(1, False, placement)
    _log_queue_share(settings, count)
    return Layout(count, True, placement)


def _log_queue_share(settings: ServerSettings, count: int) -> None:
    bound = settings.max_queue_size
    if bound:
        logger.info(
            "A copied model's requests wait at most %d in each of the %d protocol processes "
            "(max_queue_size %d for the whole server)",
            queue_share(bound, count),
            count,
            bound,
        )
