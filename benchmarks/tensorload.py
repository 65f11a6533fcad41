"""A closed-loop tritonclient load sending one large FP32 tensor per request, three ways.

- ``shm``: the input goes through system shared memory. Each request the client
  writes the tensor into its region (a memcpy: the data changes from request to
  request) and sends only its reference; the server reads it in place.
- ``http-binary``: tritonclient.http with the binary tensor extension.
- ``grpc-raw``: tritonclient.grpc, the tensor in ``raw_input_contents``.

Each of ``connections`` threads keeps one request in flight on its own client, as a
Triton user's program would. The model answers one FP32 (the sum), so the figures
measure how the input gets to the model.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.common.triton_shm import shared_memory as shm

from .loadgen import LoadResult, Target, latency_figures

SHM, HTTP_BINARY, GRPC_RAW = "shm", "http-binary", "grpc-raw"
TRANSPORTS = (SHM, HTTP_BINARY, GRPC_RAW)
MODEL = "total"
INPUT, OUTPUT = "x", "total"


@dataclass(frozen=True)
class TensorTarget(Target):
    """The server's ports, and how to send the tensor."""

    transport: str = SHM
    http_address: str = ""
    grpc_address: str = ""


@dataclass(frozen=True)
class TensorLoadResult(LoadResult):
    failed: int

    @property
    def errors(self) -> int:
        return self.failed


def tensor(mib: int) -> np.ndarray:
    """``mib`` MiB of FP32, one row."""
    count = mib * 1024 * 1024 // 4
    return np.linspace(0, 1, count, dtype=np.float32).reshape(1, count)


class Sender:
    """One client of one transport: ``infer(array)`` -> the model's answer."""

    def __init__(self, target: TensorTarget, nbytes: int) -> None:
        self.transport = target.transport
        self.region = f"bench-{os.getpid()}-{threading.get_ident()}"
        self.handle: Any = None
        if self.transport == HTTP_BINARY or self.transport == SHM:
            import tritonclient.http as lib

            self.lib: Any = lib
            self.client: Any = lib.InferenceServerClient(target.http_address, network_timeout=120)
        else:
            import tritonclient.grpc as lib

            self.lib = lib
            self.client = lib.InferenceServerClient(target.grpc_address)
        if self.transport == SHM:
            key = f"/{self.region}"
            self.handle = shm.create_shared_memory_region(self.region, key, nbytes)
            self.client.register_system_shared_memory(self.region, key, nbytes)

    def infer(self, array: np.ndarray) -> float:
        infer_input = self.lib.InferInput(INPUT, list(array.shape), "FP32")
        if self.transport == SHM:
            shm.set_shared_memory_region(self.handle, [array])
            infer_input.set_shared_memory(self.region, array.nbytes)
        elif self.transport == HTTP_BINARY:
            infer_input.set_data_from_numpy(array, binary_data=True)
        else:
            infer_input.set_data_from_numpy(array)
        result = self.client.infer(MODEL, [infer_input])
        return float(result.as_numpy(OUTPUT).reshape(-1)[0])

    def close(self) -> None:
        if self.handle is not None:
            self.client.unregister_system_shared_memory(self.region)
            shm.destroy_shared_memory_region(self.handle)
        self.client.close()


def check_once(target: TensorTarget, mib: int) -> None:
    """One request; ValueError unless the answer is the tensor's sum."""
    array = tensor(mib)
    sender = Sender(target, array.nbytes)
    try:
        got = sender.infer(array)
    finally:
        sender.close()
    expected = float(array.sum(dtype=np.float64))
    if not np.isclose(got, expected, rtol=1e-3):
        raise ValueError(f"{target.transport}: the model answered {got}, expected {expected}")


@dataclass(frozen=True)
class TensorLoad:
    """``connections`` clients, each sending ``mib`` MiB per request for a duration."""

    mib: int
    connections: int = 1
    name: str = "tritonclient"

    def run(self, target: Target, seconds: float, rate_hint: float | None) -> TensorLoadResult:
        assert isinstance(target, TensorTarget)
        array = tensor(self.mib)

        def client() -> tuple[Callable[[], Any], Callable[[], None]]:
            sender = Sender(target, array.nbytes)
            return (lambda: sender.infer(array)), sender.close

        return run_clients(client, self.connections, seconds, target.transport)


# A client thread's request (called over and over) and its close, made in the thread.
Client = tuple[Callable[[], Any], Callable[[], None]]


def run_clients(
    open_client: Callable[[], Client], connections: int, seconds: float, label: str
) -> TensorLoadResult:
    """``connections`` threads, each with a client of its own keeping one request in
    flight for ``seconds``: the closed loop of every tritonclient load."""
    latencies: list[float] = []
    failures: list[BaseException] = []
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    threads = [
        threading.Thread(target=_client, args=(open_client, deadline, latencies, failures))
        for _ in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    duration = time.perf_counter() - started
    if failures and not latencies:
        raise RuntimeError(f"{label}: every request failed: {failures[0]}")
    return _result(latencies, duration, len(failures))


def _client(
    open_client: Callable[[], Client],
    deadline: float,
    latencies: list[float],
    failures: list[BaseException],
) -> None:
    send, close = open_client()
    try:
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            try:
                send()
            except Exception as error:  # counted; the run goes on
                failures.append(error)
                continue
            latencies.append(time.perf_counter() - began)
    finally:
        close()


def _result(latencies: list[float], duration: float, failed: int) -> TensorLoadResult:
    ms = [latency * 1000 for latency in latencies]
    return TensorLoadResult(**latency_figures(ms, len(latencies), duration), failed=failed)
