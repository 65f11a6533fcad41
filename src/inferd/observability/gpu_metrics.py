"""Triton's GPU metrics, read with NVML (nvidia-ml-py, the ``inferd[gpu]`` extra).

For each GPU the server can see, labelled ``gpu_uuid`` as Triton labels them:
``nv_gpu_utilization`` (0 to 1), ``nv_gpu_memory_total_bytes``,
``nv_gpu_memory_used_bytes`` and ``nv_gpu_power_usage`` (watts).

A daemon thread reads NVML every :data:`INTERVAL` seconds (Triton's default metrics
interval) and keeps the latest reading; a scrape serves that reading. Not read at
scrape time, because the metrics endpoint runs on the server's event loop and an
NVML call takes milliseconds (and can hang while a GPU is in trouble): inference
must never wait on the driver. Where nvidia-ml-py is not installed, NVML cannot
start (no driver) or no GPU is visible, nothing runs and the metrics are absent,
not zero. A value NVML cannot give for one GPU (power, on some boards) is left out
for that GPU alone.

Which GPUs: all of NVML's, or those ``CUDA_VISIBLE_DEVICES`` names (indices in
NVML's order, which is CUDA's with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, or UUIDs).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

INTERVAL = 2.0  # seconds between readings (Triton's --metrics-interval-ms default)
LABELS = ("gpu_uuid",)
METRICS = {  # name -> help, as Triton describes them
    "nv_gpu_utilization": "GPU utilization rate [0.0 - 1.0)",
    "nv_gpu_memory_total_bytes": "GPU total memory, in bytes",
    "nv_gpu_memory_used_bytes": "GPU used memory, in bytes",
    "nv_gpu_power_usage": "GPU power usage in watts",
}


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's values (None: NVML could not give it), by metric name."""

    uuid: str
    values: dict[str, float | None]


class GpuSampler:
    """Reads the GPUs (NVML handles by UUID) in a daemon thread, every ``interval`` s."""

    def __init__(self, nvml: Any, gpus: list[tuple[str, Any]], interval: float) -> None:
        self._nvml = nvml
        self._gpus = gpus
        self.interval = interval
        self._errors: tuple[type[BaseException], ...] = (getattr(nvml, "NVMLError", Exception),)
        self.readings: tuple[GpuReading, ...] = self.read()  # the first scrape has values
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inferd-gpu-metrics", daemon=True)
        self._thread.start()

    def read(self) -> tuple[GpuReading, ...]:
        return tuple(GpuReading(uuid, self._values(handle)) for uuid, handle in self._gpus)

    def _values(self, handle: Any) -> dict[str, float | None]:
        nvml = self._nvml
        memory = self._ask(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        return {
            "nv_gpu_utilization": self._ask(
                lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100
            ),
            "nv_gpu_memory_total_bytes": None if memory is None else float(memory.total),
            "nv_gpu_memory_used_bytes": None if memory is None else float(memory.used),
            "nv_gpu_power_usage": self._ask(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
        }

    def _ask(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except self._errors:  # not supported by this GPU, or it is lost: leave it out
            return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.readings = self.read()  # one reference swap: a scrape sees whole readings
            except Exception:  # keep the thread (and the last values) alive
                logger.warning("Reading the GPU metrics failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def start_sampler(interval: float = INTERVAL, nvml: Any = None) -> GpuSampler | None:
    """Start reading the visible GPUs; None where there is nothing to read (no
    nvidia-ml-py, NVML cannot start, or no GPU is visible)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except Exception as error:  # NVMLError: no driver, or a driver too old
        logger.debug("No GPU metrics: NVML did not start (%s)", error)
        return None
    try:
        gpus = visible_gpus(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except Exception as error:
        logger.warning("No GPU metrics: NVML could not list the GPUs (%s)", error)
        gpus = []
    if not gpus:
        nvml.nvmlShutdown()
        return None
    return GpuSampler(nvml, gpus, interval)


def visible_gpus(nvml: Any, chosen: str | None) -> list[tuple[str, Any]]:
    """(UUID, handle) of each GPU the server may use: NVML's, or those ``chosen``
    (CUDA_VISIBLE_DEVICES) names, read as CUDA reads it (up to the first entry that
    names no GPU)."""
    gpus = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        gpus.append((str(index), uuid.decode() if isinstance(uuid, bytes) else uuid, handle))
    if chosen is None:
        return [(uuid, handle) for _, uuid, handle in gpus]
    picked: dict[str, Any] = {}
    for entry in (part.strip() for part in chosen.split(",")):
        found = [gpu for gpu in gpus if entry and entry in (gpu[0], gpu[1][: len(entry)])]
        if not found:
            break
        _, uuid, handle = found[0]
        picked.setdefault(uuid, handle)
    return list(picked.items())


class GpuCollector(Collector):
    """The latest reading as Prometheus gauges, one sample per GPU and value."""

    def __init__(self, sampler: GpuSampler) -> None:
        self.sampler = sampler

    def describe(self) -> Iterable[Metric]:
        return list(_families(()))

    def collect(self) -> Iterable[Metric]:
        return _families(self.sampler.readings)


def _families(readings: Iterable[GpuReading]) -> Iterator[Metric]:
    families = {
        name: GaugeMetricFamily(name, text, labels=LABELS) for name, text in METRICS.items()
    }
    for reading in readings:
        for name, value in reading.values.items():
            if value is not None:
                families[name].add_metric((reading.uuid,), value)
    yield from families.values()


@functools.cache
def sampler() -> GpuSampler | None:
    """This process's one sampler, started on first use (every registry shares it)."""
    return start_sampler()


def register(registry: CollectorRegistry) -> None:
    """Add the GPU metrics to ``registry`` where a GPU can be read; else nothing."""
    gpus = sampler()
    if gpus is not None:
        registry.register(GpuCollector(gpus))
