"""``python -m benchmarks.batching_processes``: layouts, batch sizes, medians, the table,
its command line, and the device-like model it writes."""

from __future__ import annotations

import fcntl
import importlib.util
import threading
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from benchmarks.batching_processes.__main__ import parse
from benchmarks.batching_processes.measure import latency_and_rate
from benchmarks.batching_processes.models import device_model, write_repository
from benchmarks.batching_processes.report import (
    Counts,
    Window,
    best_rate,
    counts_of,
    layouts,
    markdown_table,
    mean_batch,
    summarize,
)
from benchmarks.loadgen import WrkResult
from benchmarks.scale.load import Outcome
from inferd.types import Tensor
from tests.unit.runtime_helpers import load, model_settings, request


def test_the_layouts_are_one_batcher_twice_then_one_per_replica() -> None:
    found = layouts([2, 4])
    assert [(each.servers, each.parallel_workers) for each in found] == [
        (1, 1), (1, 0), (2, 0), (4, 0),
    ]  # fmt: skip
    assert [each.batchers for each in found] == [1, 1, 2, 4]
    assert [each.label for each in found] == [
        "1 process, model in 1 worker",
        "1 process, model in process",
        "2 replicas (a batcher each)",
        "4 replicas (a batcher each)",
    ]


def test_counts_add_up_every_version_of_the_model() -> None:
    stats = [
        {"name": "m", "version": "1", "inference_count": 30, "execution_count": 10},
        {"name": "m", "version": "2", "inference_count": 5, "execution_count": 5},
    ]
    assert counts_of(stats) == Counts(inferences=35, executions=15)
    assert counts_of([]) == Counts(0, 0)
    assert Counts(35, 15) + Counts(5, 1) == Counts(inferences=40, executions=16)  # replicas


def test_the_mean_batch_is_rows_over_calls_within_the_window() -> None:
    assert mean_batch(Counts(100, 40), Counts(400, 100)) == pytest.approx(5.0)
    assert mean_batch(Counts(100, 40), Counts(100, 40)) is None  # nothing ran


def window(
    layout: str, round_index: int, rate: float, batch: float | None, errors: int = 0
) -> Window:
    return Window(
        model="iris", connections=8, layout=layout, round=round_index, requests=int(rate * 4),
        requests_per_s=rate, p50_ms=1.0 + round_index, p99_ms=5.0, errors=errors,
        mean_batch=batch, rows=int(rate * 4), processes=2 if "replicas" in layout else 1,
        cpu_us_per_request=None,
    )  # fmt: skip


def test_summaries_are_medians_over_rounds_with_errors_summed() -> None:
    one, two = "1 process, model in process", "2 replicas (a batcher each)"
    windows = [
        window(one, 0, 1000, 4.0), window(two, 0, 800, 2.0, errors=1),
        window(two, 1, 900, 2.5), window(one, 1, 1200, 5.0),
        window(one, 2, 1100, None), window(two, 2, 700, 3.0, errors=2),
    ]  # fmt: skip
    summary = summarize(windows)
    assert list(summary) == [("iris", 8)]
    rows = summary[("iris", 8)]
    assert list(rows) == [one, two]  # first-run order
    assert rows[one]["requests_per_s"] == 1100 and rows[one]["mean_batch"] == 4.5
    assert rows[two]["requests_per_s"] == 800 and rows[two]["mean_batch"] == 2.5
    assert (rows[two]["errors"], rows[two]["rounds"], rows[two]["processes"]) == (3, 3, 2)
    assert rows[one]["cpu_us_per_request"] is None  # no /proc reading: no figure


def test_the_table_compares_each_layout_with_the_best_single_batcher() -> None:
    worker, inproc, two = (layout.label for layout in layouts([2]))
    windows = [window(worker, 0, 1000, 4.0), window(inproc, 0, 1250, 1.0),
               window(two, 0, 500, 1.0)]  # fmt: skip
    summary = summarize(windows)
    assert best_rate(summary[("iris", 8)], [worker, inproc]) == 1250
    assert best_rate(summary[("iris", 8)], ["not run"]) is None
    head, rule, *rows = markdown_table(summary, [worker, inproc])
    assert "of the best one batcher" in head and rule.startswith("|---")
    assert rows[0].startswith("| iris | 8 | 1 process, model in 1 worker | 1,000 | 0.80 |")
    assert rows[1].startswith("|  |  | 1 process, model in process | 1,250 | 1.00 |")
    assert rows[2].startswith(
        "|  |  | 2 replicas (a batcher each) | 500 | 0.40 | 1.00 | 5.00 | 1.0 |"
    )


def wrk_outcome(rate: float, p50_ms: float, p99_ms: float, wrong: int = 0) -> Outcome:
    result = WrkResult(
        requests=int(rate * 4), duration_s=4.0, requests_per_s=rate, p50_ms=p50_ms,
        p90_ms=p99_ms, p99_ms=p99_ms, mean_ms=p50_ms, max_ms=p99_ms, non2xx=1,
        socket_errors={"connect": 0, "read": 0, "write": 0, "timeout": 0},
    )  # fmt: skip
    return Outcome(result, wrong)


def test_replicas_load_adds_up_as_a_scale_fleet_s() -> None:
    """req/s and errors summed, the middle p50, the worst p99."""
    outcomes = [wrk_outcome(300, 2.0, 9.0, wrong=2), wrk_outcome(500, 1.0, 4.0),
                wrk_outcome(400, 5.0, 6.0)]  # fmt: skip
    assert latency_and_rate(outcomes) == {
        "requests_per_s": 1200, "p50_ms": 2.0, "p99_ms": 9.0, "errors": 5,
    }  # fmt: skip


def test_the_command_line_refuses_what_would_not_measure_per_process_batching() -> None:
    args = parse([])
    assert (args.replicas, args.connections, args.rounds) == ([2], [8, 32], 3)
    assert parse(["--processes", "2", "4"]).replicas == [2, 4]  # the earlier runs' name
    for wrong in (["--replicas", "1"], ["--connections", "0"], ["--duration", "0"]):
        with pytest.raises(SystemExit):
            parse(wrong)


def device_module(folder: Path, fixed_ms: float, row_ms: float) -> ModuleType:
    write_repository(folder, fixed_ms, row_ms)
    return load_device_module(folder)


def load_device_module(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("device", folder / "device" / "device.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replicas_repositories_share_one_device(tmp_path: Path) -> None:
    """Each replica's copy of the device model takes its turn on the lock they name."""
    lock = tmp_path / "device.lock"
    for name in ("one", "two"):
        write_repository(tmp_path / name, 1, 0, device_lock=lock)
    modules = [load_device_module(tmp_path / name) for name in ("one", "two")]
    assert [module.LOCK for module in modules] == [lock, lock]
    alone = device_module(tmp_path / "alone", 1, 0)  # a lone server's: its model's folder
    own_folder = tmp_path / "alone" / "device"
    assert own_folder / "device.lock" == alone.LOCK


def test_the_device_model_costs_a_call_plus_its_rows_and_answers_twice_its_input(
    tmp_path: Path,
) -> None:
    module = device_module(tmp_path, fixed_ms=20, row_ms=5)
    model = load(module.Device, model_settings(tmp_path / "device", "device.Device"))
    rows = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], dtype=np.float32)
    began = time.perf_counter()
    (output,) = model.predict(request(Tensor("input-0", rows))).outputs
    assert time.perf_counter() - began >= 0.020 + 4 * 0.005
    assert output.name == "y" and np.array_equal(output.data, rows * 2)
    expected = device_model(20, 5).expected
    assert np.allclose(expected, np.asarray([5.1, 3.5, 1.4, 0.2]) * 2)


def test_the_device_is_one_for_every_copy_and_thread_of_the_model(tmp_path: Path) -> None:
    """A call waits while another process or thread holds the device (its lock file)."""
    module = device_module(tmp_path, fixed_ms=1, row_ms=0)
    model = load(module.Device, model_settings(tmp_path / "device", "device.Device"))
    answers: list[object] = []
    one_row = request(Tensor("input-0", np.ones((1, 2), dtype=np.float32)))
    call = threading.Thread(target=lambda: answers.append(model.predict(one_row)))
    with module.LOCK.open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        call.start()
        call.join(timeout=0.2)
        assert call.is_alive()  # it waits for the device however long this holds it
    call.join(timeout=10)  # closing the file let it go
    assert not call.is_alive() and len(answers) == 1


def test_two_threads_of_one_copy_take_turns_on_the_device(tmp_path: Path) -> None:
    """threads_per_worker 2: two calls of one instance at once still run one at a time."""
    module = device_module(tmp_path, fixed_ms=100, row_ms=0)
    model = load(module.Device, model_settings(tmp_path / "device", "device.Device"))
    one_row = request(Tensor("input-0", np.ones((1, 2), dtype=np.float32)))
    calls = [threading.Thread(target=model.predict, args=(one_row,)) for _ in range(2)]
    began = time.perf_counter()
    for call in calls:
        call.start()
    for call in calls:
        call.join(timeout=10)
    assert time.perf_counter() - began >= 0.2
