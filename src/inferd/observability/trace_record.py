"""What a traced request records on its way down, for its spans (observability/tracing.py).

No OpenTelemetry here: the scheduler and the pools fill these plain records
(only for a request that is traced: ``RequestContext.trace`` is None otherwise),
and the server turns them into child spans of the request's span once it has
been answered, with the times recorded. Recording times rather than opening
spans where things happen keeps OpenTelemetry out of the core and out of the
worker processes, which send back two timestamps instead of exporting spans.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class BatchRun:
    """One execution of a model: a batch of one request or of several merged ones.

    A batch is shared by the traced requests in it; each shows it as a child span
    of its own (see observability/tracing.py)."""

    rows: int  # the batch size: rows of all its requests together
    requests: int
    # Where predict ran: a worker process's index (None: in the main process), and
    # when, in nanoseconds since the epoch as that process's clock read them (0: not run).
    worker: int | None = None
    predict_started_ns: int = 0
    predict_ended_ns: int = 0
    # A model host's version (host/client.py): how long the batch waited in the
    # host's queue once this process sent it, and False when the host answered from
    # its response cache (no model work: no child spans, as a lone server's hit).
    waited_ns: int = 0
    ran: bool = True

    def predicted(self, worker: int | None, started_ns: int, ended_ns: int) -> None:
        self.worker = worker
        self.predict_started_ns = started_ns
        self.predict_ended_ns = ended_ns


@dataclass(slots=True)
class RequestTrace:
    """One traced request: its server span and the times of its way through its model.

    Times are ``time.perf_counter_ns()`` readings of the main process (0: not reached)."""

    span: Any  # the request's span (an opentelemetry Span: typed loosely, see above)
    queued_ns: int = 0  # it reached its model's scheduler
    dispatched_ns: int = 0  # its batch started (equal to queued_ns: it did not wait)
    ended_ns: int = 0  # its batch's answer came back
    batch: BatchRun | None = None

    def ran(self, queued_ns: int, dispatched_ns: int, ended_ns: int) -> None:
        self.queued_ns = queued_ns
        self.dispatched_ns = dispatched_ns
        self.ended_ns = ended_ns


def shared_run(traces: Iterable[RequestTrace | None], rows: int, requests: int) -> BatchRun | None:
    """The record of a batch starting, given to each of its traced requests (None:
    none of them is traced, and nothing is recorded)."""
    run = None
    for trace in traces:
        if trace is not None:
            if run is None:
                run = BatchRun(rows, requests)
            trace.batch = run
    return run
