"""Which models every protocol process may load a copy of, and so how many processes run.

With ``protocol_processes`` N > 1 each protocol process is a whole server whose
models run in its own process (``parallel_workers: 0``): a model is loaded N
times. That is right for a model on the CPU that any copy can answer, and wrong
for one that must exist once or needs a worker process:

- a cuda device (``devices``, or a ``device`` parameter naming cuda): N copies of
  its weights on one GPU, each with its own CUDA context;
- ``sequence_batching``: a sequence's state lives in one copy, but its requests
  arrive on whichever process took their connection;
- adaptive batching (``max_batch_size`` > 1): a model that batches wants its
  concurrent requests to meet in one batcher; a batcher per process sees 1/N of
  them, and a synchronous ``predict`` in process never batches (measured:
  benchmarks/README.md, "Batching across protocol processes");
- ``inference_timeout``: a call is stopped by killing its worker process, which a
  model in the protocol process does not have;
- its own Python environment (``environment_path``/``environment_tarball``): it
  runs in a worker process of that environment's interpreter;
- an explicit ``workers`` count: the operator sized its processes by hand.

Such a model runs in the model host instead (docs/design.md "The model host"): one
more process, which loads it once, with its worker processes, batcher and
sequences, and serves it to every protocol process. The host starts with the
server when a model loaded at start needs it (:func:`needs_model_host`), else the
coordinator starts it when a load first needs it (supervisor/host_on_demand.py):
any model can be loaded at any time, whatever the layout.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from inferd.settings import ModelSettings, ServerSettings

logger = logging.getLogger(__name__)


def why_not_replicated(model: ModelSettings) -> str | None:
    """Why ``model`` cannot be loaded once per protocol process; None if it can."""
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
    if model.inference_timeout:
        return "it sets inference_timeout (a call is stopped by killing its worker process)"
    parameters = model.parameters
    if parameters is not None and (parameters.environment_path or parameters.environment_tarball):
        return "it runs in its own Python environment (environment_path/environment_tarball)"
    if model.workers is not None:
        return f"it sets workers: {model.workers} (its worker processes are sized by hand)"
    return None


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


def copied(model: ModelSettings) -> bool:
    """Whether every protocol process loads a copy of ``model`` (else the host runs it)."""
    return why_not_replicated(model) is None


def needs_model_host(startup_models: Iterable[ModelSettings]) -> bool:
    """Whether a model loaded at start must run in the model host (each such model
    and why logged)."""
    needed = False
    for model in startup_models:
        reason = why_not_replicated(model)
        if reason is not None:
            logger.info(
                "%s runs in the model host, once, for every protocol process: %s",
                model.label[:1].upper() + model.label[1:],
                reason,
            )
            needed = True
    return needed


# Up to this many CPUs, a hosted model loaded at start with the default
# protocol_processes runs one protocol process instead: on 2 cores the decoding has no
# core to spread to, and the hop to the host cost 0.85 of one process's rate
# (benchmarks/README.md, "Through the model host"). Only the start-up models can
# choose it: once serving, the processes are not changed, and a hosted model
# loaded later starts the host.
SMALLEST_HOSTING = 3


def serving_layout(
    settings: ServerSettings, startup_models: Iterable[ModelSettings]
) -> tuple[int, bool]:
    """How many protocol processes serve, and whether the model host starts with them
    (else it starts when a load first needs it)."""
    count = settings.protocol_processes
    if count <= 1 or not needs_model_host(startup_models):
        return count, False
    if count < SMALLEST_HOSTING and "protocol_processes" not in settings.model_fields_set:
        logger.info(
            "Serving with one protocol process: with %d CPUs the model host would cost "
            "more than the second process brings; set protocol_processes to have both",
            count,
        )
        return 1, False
    return count, True
