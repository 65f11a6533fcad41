"""Triton's GPU metrics from a fake NVML (pynvml's interface): values, labels, absence."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inferd.observability import gpu_metrics
from inferd.observability.metrics import Sources, build_registry
from inferd.observability.stats import ModelStatsTable

UUIDS = ("GPU-11111111-aaaa", "GPU-22222222-bbbb", "GPU-33333333-cccc")


class NVMLError(Exception):
    pass


class FakeNvml(types.ModuleType):
    """pynvml's calls over made-up GPUs; ``power[i] is None``: not supported there."""

    NVMLError = NVMLError

    def __init__(self, count: int = 2, start_error: bool = False) -> None:
        super().__init__("pynvml")
        self.count = count
        self.start_error = start_error
        self.utilization = [37, 80, 5]
        self.used = [1 << 30, 2 << 30, 0]
        self.power: list[int | None] = [71_500, None, 30_000]  # milliwatts
        self.reads = 0
        self.running = False

    def nvmlInit(self) -> None:
        if self.start_error:
            raise NVMLError("Driver Not Loaded")
        self.running = True

    def nvmlShutdown(self) -> None:
        self.running = False

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return UUIDS[handle].encode() if handle == 1 else UUIDS[handle]  # old pynvml: bytes

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        self.reads += 1
        return types.SimpleNamespace(gpu=self.utilization[handle], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=80 << 30, used=self.used[handle], free=0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        power = self.power[handle]
        if power is None:
            raise NVMLError("Not Supported")
        return power


@pytest.fixture
def sampler() -> Iterator[gpu_metrics.GpuSampler]:
    started = gpu_metrics.start_sampler(interval=0.01, nvml=FakeNvml())
    assert started is not None
    yield started
    started.stop()


def scrape(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """(metric name, gpu_uuid) -> value of every nv_gpu_* sample."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, sample.labels["gpu_uuid"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("nv_gpu_")
    }


def test_each_gpu_is_exported_with_tritons_names_and_units(
    sampler: gpu_metrics.GpuSampler,
) -> None:
    registry = CollectorRegistry()
    registry.register(gpu_metrics.GpuCollector(sampler))
    assert scrape(registry) == {
        ("nv_gpu_utilization", UUIDS[0]): 0.37,
        ("nv_gpu_memory_total_bytes", UUIDS[0]): float(80 << 30),
        ("nv_gpu_memory_used_bytes", UUIDS[0]): float(1 << 30),
        ("nv_gpu_power_usage", UUIDS[0]): 71.5,
        ("nv_gpu_utilization", UUIDS[1]): 0.8,
        ("nv_gpu_memory_total_bytes", UUIDS[1]): float(80 << 30),
        ("nv_gpu_memory_used_bytes", UUIDS[1]): float(2 << 30),
        # no power for the second GPU: NVML does not support it there, so no sample
    }


def test_a_background_thread_keeps_the_values_fresh(sampler: gpu_metrics.GpuSampler) -> None:
    nvml: Any = sampler._nvml
    nvml.utilization[0] = 99
    registry = CollectorRegistry()
    registry.register(gpu_metrics.GpuCollector(sampler))
    deadline = time.monotonic() + 10
    while scrape(registry)[("nv_gpu_utilization", UUIDS[0])] != 0.99:
        assert time.monotonic() < deadline, "the reading never changed"
        time.sleep(0.01)
    reads = nvml.reads
    generate_latest(registry)
    generate_latest(registry)
    assert nvml.reads - reads < 6  # scrapes read the kept values, not NVML


def test_the_reading_thread_survives_an_unexpected_error(
    sampler: gpu_metrics.GpuSampler, caplog: pytest.LogCaptureFixture
) -> None:
    nvml: Any = sampler._nvml
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: 1 / 0
    deadline = time.monotonic() + 10
    while "Reading the GPU metrics failed" not in caplog.text:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    del nvml.nvmlDeviceGetMemoryInfo  # the class's again
    nvml.utilization[1] = 1
    while sampler.readings[1].values["nv_gpu_utilization"] != 0.01:
        assert time.monotonic() < deadline, "the thread stopped reading"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        (None, [UUIDS[0], UUIDS[1], UUIDS[2]]),
        ("2,0", [UUIDS[2], UUIDS[0]]),
        ("1,7,2", [UUIDS[1]]),  # CUDA stops at the first entry that names no GPU
        ("GPU-33333333", [UUIDS[2]]),  # a UUID's prefix
        ("", []),
        ("-1", []),
    ],
)
def test_cuda_visible_devices_picks_the_gpus(chosen: str | None, expected: list[str]) -> None:
    nvml = FakeNvml(count=3)
    assert [uuid for uuid, _ in gpu_metrics.visible_gpus(nvml, chosen)] == expected


def test_nothing_runs_and_nothing_is_exported_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_gpu = FakeNvml(count=0)
    assert gpu_metrics.start_sampler(nvml=no_gpu) is None
    assert not no_gpu.running  # NVML shut down again
    assert gpu_metrics.start_sampler(nvml=FakeNvml(start_error=True)) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_metrics.start_sampler(nvml=FakeNvml()) is None


def server_registry() -> CollectorRegistry:
    return build_registry(Sources(ModelStatsTable()), "rest_server")


def test_the_server_registry_has_them_only_where_nvml_sees_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu_metrics.sampler.cache_clear()
    try:
        # No nvidia-ml-py (a None module raises ImportError): absent, not zero.
        monkeypatch.setitem(sys.modules, "pynvml", None)  # type: ignore[arg-type]
        assert scrape(server_registry()) == {}
        assert b"nv_gpu" not in generate_latest(server_registry())
        gpu_metrics.sampler.cache_clear()
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(count=1))
        exported = scrape(server_registry())
        assert exported[("nv_gpu_utilization", UUIDS[0])] == 0.37
        assert gpu_metrics.sampler() is gpu_metrics.sampler()  # one thread per process
    finally:
        started = gpu_metrics.sampler()
        if started is not None:
            started.stop()
        gpu_metrics.sampler.cache_clear()
