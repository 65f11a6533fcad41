"""What the dataplane does with each answer: stamp it, keep the outputs asked for,
count and log the request."""

from __future__ import annotations

import logging
import time

from inferd.errors import InvalidRequest
from inferd.observability.stats import ModelStats
from inferd.serving.model_version import ModelVersion
from inferd.types import InferenceRequest, InferenceResponse, Tensor

# One debug line per inference request; a logger of its own so that logging_settings
# can turn request logs on or off without touching the rest.
request_logger = logging.getLogger("inferd.requests")


def finish(
    response: InferenceResponse, found: ModelVersion, request: InferenceRequest
) -> InferenceResponse:
    """Stamp the response with the model's identity and keep only requested outputs."""
    response.model_name = found.name
    response.model_version = found.version
    response.id = request.id
    if request.outputs:
        response.outputs = select_outputs(response.outputs, request, found.name)
    return response


def record_end(
    stats: ModelStats, request: InferenceRequest, started_ns: int, failure: str = ""
) -> None:
    """Count a request that ended (``failure``: the error's name; empty: it succeeded)."""
    ended = time.perf_counter_ns()
    if failure:
        stats.failed(started_ns, ended)
    else:
        stats.succeeded(started_ns, ended)
    if request_logger.isEnabledFor(logging.DEBUG):
        log_request(stats, request, ended - started_ns, failure or "ok")


def log_request(
    stats: ModelStats, request: InferenceRequest, elapsed_ns: int, outcome: str
) -> None:
    milliseconds = elapsed_ns / 1e6
    request_logger.debug(
        "Inference on model %r version %r: %s in %.3f ms (id %s)",
        stats.name,
        stats.version,
        outcome,
        milliseconds,
        request.id,
        extra={
            "model_name": stats.name,
            "model_version": stats.version,
            "outcome": outcome,
            "duration_ms": round(milliseconds, 3),
            "request_id": request.id,
        },
    )


def select_outputs(outputs: list[Tensor], request: InferenceRequest, model: str) -> list[Tensor]:
    by_name = {tensor.name: tensor for tensor in outputs}
    selected = []
    for requested in request.outputs:
        tensor = by_name.get(requested.name)
        if tensor is None:
            raise InvalidRequest(
                f"Model {model!r} has no output named {requested.name!r}; "
                f"it returned {sorted(by_name)}"
            )
        selected.append(tensor)
    return selected
