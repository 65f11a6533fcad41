"""The protocol extensions a server lists in its metadata (``GET /v2``, gRPC
``ServerMetadata``): exactly those it serves with its settings, under Triton's names.

Clients read the list to decide what to call (tritonclient's examples, perf
tools, proxies); listing an extension the server refuses sends them into errors.
Triton's own list is the reference for the names and their order. ``trace`` (the
trace settings API) is served always; its settings turn tracing on per model only
where the server exports traces (observability/trace_settings.py).
``cuda_shared_memory`` is listed only where CUDA regions can be registered: shared
memory on, and a CUDA runtime that sees a GPU (elsewhere registering is refused).
"""

from __future__ import annotations

from typing import Protocol

from inferd.settings import ServerSettings

CLASSIFICATION = "classification"  # an output's top classes (inferd.triton.classification)
SEQUENCE = "sequence"
MODEL_REPOSITORY = "model_repository"
# Its optional part: an unload may unload an ensemble's steps too (serving/dependents.py).
UNLOAD_DEPENDENTS = "model_repository(unload_dependents)"
SCHEDULE_POLICY = "schedule_policy"  # the priority and timeout request parameters
MODEL_CONFIGURATION = "model_configuration"
SYSTEM_SHARED_MEMORY = "system_shared_memory"
CUDA_SHARED_MEMORY = "cuda_shared_memory"
BINARY_TENSOR_DATA = "binary_tensor_data"
PARAMETERS = "parameters"
STATISTICS = "statistics"
TRACE = "trace"
LOGGING = "logging"
GENERATE = "generate"


class SharedRegions(Protocol):
    """The server's shared memory regions (inferd.triton.shm.SharedMemoryRegistry)."""

    def serves_cuda(self) -> bool: ...


def served_extensions(settings: ServerSettings, shared: SharedRegions | None) -> list[str]:
    """The extensions this server serves with ``settings``, in Triton's order, then
    those the settings' ``extensions`` add (each once). ``shared``: its shared memory
    regions (None: the extension is off), asked whether CUDA ones can be registered."""
    optional = {
        MODEL_REPOSITORY: settings.model_repository_api,
        UNLOAD_DEPENDENTS: settings.model_repository_api,
        SYSTEM_SHARED_MEMORY: shared is not None,
        CUDA_SHARED_MEMORY: shared is not None and shared.serves_cuda(),
    }
    order = (
        CLASSIFICATION,
        SEQUENCE,
        MODEL_REPOSITORY,
        UNLOAD_DEPENDENTS,
        SCHEDULE_POLICY,
        MODEL_CONFIGURATION,
        SYSTEM_SHARED_MEMORY,
        CUDA_SHARED_MEMORY,
        BINARY_TENSOR_DATA,
        PARAMETERS,
        STATISTICS,
        TRACE,
        LOGGING,
        GENERATE,
    )
    served = [name for name in order if optional.get(name, True)]
    served += [name for name in dict.fromkeys(settings.extensions) if name not in served]
    return served
