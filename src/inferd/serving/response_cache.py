"""The response cache (``cache_enabled`` / ``cache_size``, as in MLServer; Triton's
response cache is the reference for what counts as the same request).

One server-wide LRU of at most ``cache_size`` responses, shared by every model
version that caches. A version is bound to it when it loads
(:meth:`ResponseCache.bind`) and its entries go when it is unloaded or reloaded
(:meth:`VersionCache.close`), so a new instance never answers from an old one's
results.

The key is a hash of the request as the model sees it: the decoded tensors (name,
datatype, shape, raw bytes), the requested outputs and the parameters that can
change the answer. JSON and binary (or gRPC) encodings of the same tensors decode
to the same arrays, so they share entries. Left out of the key, because they change
only how or when the answer travels, never what it is:

- request parameters ``priority``, ``timeout`` (queueing), ``binary_data_output``
  (REST encoding) and ``raw_output`` (gRPC encoding);
- the per-output ``binary_data`` parameter (REST encoding);
- the request id: a hit answers with the new request's id;
- the request's headers, which the data plane hands to an MLServer ``MLModel``
  only after the lookup (a hit answers with the headers the model set on the answer
  it reuses).

Never cached: a request with a ``sequence_id`` (a stateful model's answer depends
on what came before), a call to a runtime's own route (``@custom_handler``,
MLflow's ``/invocations``: handlers may change state, and one that reads state,
such as a counter, must read it each time), and streams.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from inferd.custom_calls import is_handler_call
from inferd.observability.stats import ModelStats
from inferd.tensors.datatypes import datatype_of
from inferd.tensors.encoding import array_to_bytes
from inferd.types import InferenceRequest, InferenceResponse, Parameters, Tensor

TRANSPORT_PARAMETERS = frozenset({"priority", "timeout", "binary_data_output", "raw_output"})
OUTPUT_TRANSPORT_PARAMETERS = frozenset({"binary_data"})
# A request carrying one of these belongs to a sequence: its answer depends on state.
STATEFUL_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end"})

Key = tuple[int, bytes]  # (the version's binding, the request's digest)


def request_digest(request: InferenceRequest) -> bytes | None:
    """The request's hash as the cache keys it; None when it must not be cached."""
    parameters = request.parameters
    if parameters and (not STATEFUL_PARAMETERS.isdisjoint(parameters) or is_handler_call(request)):
        return None
    digest = hashlib.blake2b(digest_size=20)
    for tensor in request.inputs:
        data = tensor.data
        # repr of a tuple of str/int/sorted items is unambiguous: quotes are escaped.
        head = (tensor.name, datatype_of(data.dtype), data.shape, _items(tensor.parameters))
        digest.update(repr(head).encode())
        digest.update(_raw(data))
    outputs = [
        (output.name, _items(output.parameters, OUTPUT_TRANSPORT_PARAMETERS))
        for output in request.outputs
    ]
    digest.update(repr((outputs, _items(parameters, TRANSPORT_PARAMETERS))).encode())
    return digest.digest()


def _raw(data: np.ndarray) -> Any:
    """The tensor's bytes without a copy where possible (BYTES: each element's
    length and bytes, so element boundaries count)."""
    if data.dtype.kind == "O" or data.dtype.kind in "US":
        return array_to_bytes(data)
    if data.dtype.byteorder == ">":  # the protocol's bytes are little-endian
        data = data.astype(data.dtype.newbyteorder("<"))
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


def _items(parameters: Parameters, leave_out: frozenset[str] = frozenset()) -> list[Any]:
    if not parameters:
        return []
    return sorted((k, v) for k, v in parameters.items() if k not in leave_out)


class ResponseCache:
    """The server's LRU of responses, at most ``size`` of them for all versions."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[Key, InferenceResponse] = OrderedDict()
        self._bindings = 0

    def __len__(self) -> int:
        return len(self._entries)

    def bind(self, stats: ModelStats) -> VersionCache:
        """A model version's view of the cache; its hits and misses count in ``stats``."""
        self._bindings += 1
        return VersionCache(self, self._bindings, stats)

    def get(self, key: Key) -> InferenceResponse | None:
        response = self._entries.get(key)
        if response is not None:
            self._entries.move_to_end(key)
        return response

    def put(self, key: Key, response: InferenceResponse) -> None:
        self._entries[key] = response
        self._entries.move_to_end(key)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def drop(self, binding: int) -> None:
        """Forget every response of one binding (its version was unloaded)."""
        for key in [key for key in self._entries if key[0] == binding]:
            del self._entries[key]


class VersionCache:
    """One loaded model version's entries in the :class:`ResponseCache`."""

    __slots__ = ("_binding", "_cache", "_closed", "_stats")

    def __init__(self, cache: ResponseCache, binding: int, stats: ModelStats) -> None:
        self._cache = cache
        self._binding = binding
        self._stats = stats
        self._closed = False

    def lookup(self, request: InferenceRequest) -> tuple[Key | None, InferenceResponse | None]:
        """(the request's key, the cached answer stamped with the request's id); the key
        is None for a request that is not cached, the answer None on a miss. Counted
        as Triton does: a hit's time is its lookup; a miss's is its lookup plus the
        insertion of its answer (:meth:`store`)."""
        started = time.perf_counter_ns()
        digest = request_digest(request)
        if digest is None:
            return None, None
        key = (self._binding, digest)
        cached = self._cache.get(key)
        if cached is None:
            self._stats.cache_missed(time.perf_counter_ns() - started)
            return key, None
        # New Tensor objects (same arrays): layers after this one may set parameters.
        outputs = [Tensor(t.name, t.data, dict(t.parameters)) for t in cached.outputs]
        answer = InferenceResponse(
            outputs,
            cached.model_name,
            cached.model_version,
            request.id,
            dict(cached.parameters) if cached.parameters else {},
        )
        self._stats.cache_hit(time.perf_counter_ns() - started)
        return key, answer

    def store(self, key: Key, response: InferenceResponse) -> None:
        """Keep the answer of a request that missed (unless the version is gone): a copy
        of its parameters, which the layers above may still change (headers go out)."""
        started = time.perf_counter_ns()
        if not self._closed:
            kept = InferenceResponse(
                response.outputs,
                response.model_name,
                response.model_version,
                response.id,
                dict(response.parameters) if response.parameters else {},
            )
            self._cache.put(key, kept)
        self._stats.cache_stored(time.perf_counter_ns() - started)

    def close(self) -> None:
        """The version is unloaded or replaced: its answers go, none are stored again."""
        self._closed = True
        self._cache.drop(self._binding)
