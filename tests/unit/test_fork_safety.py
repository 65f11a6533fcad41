"""The fork parent's check, right before each fork, that forking it is safe."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from inferd.workers import fork_safety
from inferd.workers.fork_safety import cuda_initialized, fork_hazards


def _hazards_in_a_fresh_interpreter(prelude: str) -> str:
    """What fork_hazards() says in a new interpreter after running ``prelude``
    (this test process may have threads of its own)."""
    code = textwrap.dedent(prelude) + (
        "\nfrom inferd.workers.fork_safety import fork_hazards\nprint(fork_hazards())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.strip()


def test_a_clean_process_may_fork() -> None:
    # numpy's BLAS pool is native, not a Python thread, and re-creates itself after a fork.
    assert _hazards_in_a_fresh_interpreter("import numpy") == "[]"


def test_a_thread_left_running_forbids_the_fork() -> None:
    said = _hazards_in_a_fresh_interpreter(
        """
        import threading
        threading.Thread(target=threading.Event().wait, name="poller", daemon=True).start()
        """
    )
    assert "threads are running (poller)" in said


def test_a_socket_opened_since_and_kept_forbids_the_fork() -> None:
    before = fork_safety.open_sockets()
    assert fork_safety.sockets_left_open(before) == ""
    first, second = socket.socketpair()
    with first, second:
        assert len(fork_safety.open_sockets() - before) == 2
        assert fork_safety.sockets_left_open(before).startswith("2 socket(s) it opened")
    assert fork_safety.sockets_left_open(before) == ""  # closed: nothing shared


def test_grpc_imported_is_no_hazard_but_its_core_started_is() -> None:
    assert _hazards_in_a_fresh_interpreter("import grpc") == "[]"
    said = _hazards_in_a_fresh_interpreter(
        """
        import grpc
        channel = grpc.insecure_channel("127.0.0.1:1")
        """
    )
    assert "native threads are running" in said and "grpc_global_tim" in said


def test_a_running_event_loop_forbids_the_fork() -> None:
    async def check() -> list[str]:
        return fork_hazards()

    assert "an event loop is running" in asyncio.run(check())


def test_cuda_initialized_by_torch_forbids_the_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert cuda_initialized()
    assert "CUDA is initialized" in fork_hazards()


def test_the_cuda_driver_loaded_counts_as_cuda_initialized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(fork_safety, "CUDA_DRIVER", "libno-such-driver.so")
    assert not cuda_initialized()
    monkeypatch.setattr(fork_safety, "CUDA_DRIVER", "libc.so")  # loaded in every process
    assert cuda_initialized()


def _openmp_hazard_in_a_fresh_interpreter(prelude: str) -> str:
    code = textwrap.dedent(prelude) + (
        "\nfrom inferd.workers.fork_safety import openmp_hazard\n"
        "print(repr(openmp_hazard(timeout=1.5)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.strip()


def test_an_openmp_pool_that_ran_forbids_the_fork() -> None:
    # LightGBM runs OpenMP parallel regions (here training; loading a model does too):
    # libgomp's pool then hangs every forked child in its first parallel region.
    said = _openmp_hazard_in_a_fresh_interpreter(
        """
        import numpy, lightgbm
        data = numpy.random.default_rng(0).random((200, 4))
        lightgbm.train({"verbose": -1}, lightgbm.Dataset(data, data[:, 0] > 0.5), 2)
        """
    )
    assert "an OpenMP thread pool" in said and "libgomp" in said


def test_openmp_loaded_but_never_run_allows_the_fork() -> None:
    # scikit-learn carries libgomp; importing it and predicting with a forest runs none.
    said = _openmp_hazard_in_a_fresh_interpreter(
        """
        import numpy
        from sklearn.ensemble import RandomForestClassifier
        data = numpy.random.default_rng(0).random((50, 4))
        RandomForestClassifier(3).fit(data, data[:, 0] > 0.5).predict(data)
        """
    )
    assert said == "''"


def test_openmp_held_to_one_thread_while_lightgbm_runs_leaves_the_fork_safe() -> None:
    # What a fork parent does around its loads: the same training as above starts no
    # pool, and a child given 2 threads back runs a 2-thread region (no hang).
    said = _openmp_hazard_in_a_fresh_interpreter(
        """
        from inferd.workers.fork_safety import hold_openmp, release_openmp
        import os, numpy, lightgbm
        before = hold_openmp()
        data = numpy.random.default_rng(0).random((200, 4))
        booster = lightgbm.train({"verbose": -1}, lightgbm.Dataset(data, data[:, 0] > 0.5), 2)
        pid = os.fork()
        if pid == 0:
            release_openmp("2")
            booster.predict(numpy.random.default_rng(1).random((20000, 4)))
            os._exit(0 if os.environ["OMP_NUM_THREADS"] == "2" else 1)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        release_openmp(before)
        """
    )
    assert said == "''"


@pytest.mark.parametrize("quiet", [False, True], ids=["tqdm-as-is", "no-monitor"])
def test_a_progress_bar_leaves_no_thread_once_the_fork_parent_turned_its_monitor_off(
    quiet: bool,
) -> None:
    """transformers shows tqdm bars while it loads weights: their monitor thread lived
    on and made the protocol fork parent load each Hugging Face model in every process."""
    script = textwrap.dedent(
        f"""
        from inferd.runtimes.common import no_progress_monitor
        from inferd.workers.fork_safety import fork_hazards
        if {quiet}:
            no_progress_monitor()
        from tqdm import tqdm
        for _ in tqdm(range(3)):
            pass
        print(repr(fork_hazards()))
        """
    )
    said = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert (said == "[]") is quiet, said
