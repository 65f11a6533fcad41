"""Starting a model version's calls on the pool and recording them, alike for every
dispatch policy.

Each execution is counted in the version's statistics (rows and requests per
execution), and a batch with traced requests gets one shared record, given to
the pool inside the call, where the runtime's predict notes where and when it
ran. Each answered request's wait and run go to the statistics and its trace.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from inferd.observability.stats import ModelStats, rows_of
from inferd.observability.trace_record import RequestTrace, shared_run
from inferd.types import InferenceRequest
from inferd.workers.base import Call, Execution, Holder, Pool, ResponseStream


class Launcher:
    """Starts calls of one instance on the pool, counting, timing and tracing them."""

    def __init__(self, pool: Pool, instance_id: int, stats: ModelStats | None) -> None:
        self.pool = pool
        self.instance_id = instance_id
        self._stats = stats

    def capacity(self) -> int:
        return self.pool.capacity(self.instance_id)

    def ran(self, queued_ns: int, dispatched_ns: int, trace: RequestTrace | None) -> None:
        """A request answered now waited from ``queued_ns`` until ``dispatched_ns``
        (perf_counter_ns), then ran."""
        if self._stats is not None:
            self._stats.waited(dispatched_ns - queued_ns)
            self._stats.computed(time.perf_counter_ns() - dispatched_ns)
        if trace is not None:
            trace.ran(queued_ns, dispatched_ns, time.perf_counter_ns())

    def streamed(self, queued_ns: int, dispatched_ns: int) -> None:
        """A stream that waited from ``queued_ns`` until ``dispatched_ns`` ended now."""
        if self._stats is not None:
            self._stats.waited(dispatched_ns - queued_ns)
            self._stats.computed(time.perf_counter_ns() - dispatched_ns)

    def count(self, rows: int, requests: int) -> None:
        """One execution of ``requests`` requests and ``rows`` rows in all."""
        if self._stats is not None:
            self._stats.executed(rows, requests)

    def predict_one(
        self,
        request: InferenceRequest,
        trace: RequestTrace | None,
        holder: Holder | None = None,
    ) -> Execution:
        """Count and start a request that runs alone (on ``holder``, if given)."""
        rows = rows_of(request.inputs)
        if self._stats is not None:
            self._stats.executed(rows, 1)
        run = None if trace is None else shared_run((trace,), rows, 1)
        try:  # as predict() does, inline: this is every lone request's path
            return self.pool.predict(Call(self.instance_id, request, holder, run))
        except Exception as error:
            return Execution.failed(error)

    def predict_batch(
        self,
        request: InferenceRequest,
        traces: Iterable[RequestTrace | None],
        rows: int,
        requests: int,
    ) -> Execution:
        """Count and start a batch (``request``: its requests merged, or the one)."""
        self.count(rows, requests)
        run = shared_run(traces, rows, requests)
        return self.predict(Call(self.instance_id, request, None, run))

    def predict(self, call: Call) -> Execution:
        """Start ``call``; one that cannot start fails its execution with the reason."""
        try:
            return self.pool.predict(call)
        except Exception as error:  # raised before it started: the waiter gets it
            return Execution.failed(error)

    def stream(self, request: InferenceRequest, holder: Holder | None = None) -> ResponseStream:
        """Start a stream (uncounted: each policy counts it where it did); raises if
        it cannot start."""
        return self.pool.stream(Call(self.instance_id, request, holder))
