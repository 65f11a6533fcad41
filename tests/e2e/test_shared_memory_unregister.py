"""Unregistering shared memory while requests use it, as Triton's qa/L0_shared_memory
TestSharedMemoryUnregister does it, with tritonclient over HTTP and gRPC.

Triton marks a region a request holds and removes it when the last request holding
it has written its outputs: meanwhile the unregister succeeds, the region stays
listed and usable (a request sent after the unregister holds it too), and its name
stays taken ("already in manager"). With three protocol processes the same holds
whichever process each connection lands on: a region drains everywhere before any
process drops it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server
from tests.support.triton_shm import shared_memory as shm

PREFIX = f"/inferd-e2e-unreg-{os.getpid()}-"
ROW = 16
ROW_BYTES = ROW * 4
REGIONS = ("input0_data", "input1_data", "output0_data", "output1_data")
FIRST = np.arange(ROW, dtype=np.int32).reshape(1, ROW)
SECOND = np.ones((1, ROW), dtype=np.int32)


@pytest.fixture(
    scope="module",
    params=[{}, {"protocol_processes": 3}],
    ids=["1-protocol-process", "3-protocol-processes"],
)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("shm-unregister")
    # Two requests in the model at once: the second is sent while the first is held.
    add_custom_model(repository, "simple", "GatedAddSub", workers=1, threads_per_worker=2)
    settings = {"shared_memory_enabled": True, "shared_memory_key_prefix": PREFIX, **request.param}
    with start_server(repository, settings) as process:
        yield process


@pytest.fixture
def handles(server: ServerProcess) -> Iterator[dict[str, Any]]:
    """The four regions of Triton's test, made and registered; destroyed after."""
    made = {
        name: shm.create_shared_memory_region(name, PREFIX + name, ROW_BYTES) for name in REGIONS
    }
    shm.set_shared_memory_region(made["input0_data"], [FIRST])
    shm.set_shared_memory_region(made["input1_data"], [SECOND])
    with fresh(server) as client:
        for name in REGIONS:
            client.register_system_shared_memory(name, PREFIX + name, ROW_BYTES)
    yield made
    with fresh(server) as client:
        client.unregister_system_shared_memory()
    for handle in made.values():
        shm.destroy_shared_memory_region(handle)


def fresh(server: ServerProcess) -> httpclient.InferenceServerClient:
    """A new HTTP connection (with several protocol processes: to any of them)."""
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def listed_everywhere(server: ServerProcess, expected: set[str], tries: int = 6) -> bool:
    """Whether ``tries`` new connections each list exactly ``expected``."""
    for _ in range(tries):
        with fresh(server) as client:
            if {region["name"] for region in client.get_system_shared_memory_status()} != expected:
                return False
    return True


class Gated:
    """One request of the gated `simple` model, sent in the background."""

    def __init__(self, protocol: str, server: ServerProcess, folder: Path, tag: str) -> None:
        self.started, self.gate = folder / f"started-{tag}", folder / f"gate-{tag}"
        lib = httpclient if protocol == "http" else grpcclient
        inputs = [lib.InferInput(name, [1, ROW], "INT32") for name in ("INPUT0", "INPUT1")]
        inputs[0].set_shared_memory("input0_data", ROW_BYTES)
        inputs[1].set_shared_memory("input1_data", ROW_BYTES)
        outputs = [lib.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
        outputs[0].set_shared_memory("output0_data", ROW_BYTES)
        outputs[1].set_shared_memory("output1_data", ROW_BYTES)
        parameters = {"started": str(self.started), "gate": str(self.gate)}
        self.results: list[Any] = []
        if protocol == "http":
            self.client: Any = fresh(server)
            self.pending = self.client.async_infer(
                "simple", inputs, outputs=outputs, parameters=parameters
            )
        else:
            self.client = grpcclient.InferenceServerClient(server.grpc_address)
            self.pending = None
            self.client.async_infer(
                "simple",
                inputs,
                outputs=outputs,
                parameters=parameters,
                callback=partial(
                    lambda results, result, error: results.append(error or result), self.results
                ),
            )
        wait_for(self.started.exists, f"request {tag} to reach the model")

    def finish(self) -> Any:
        """Let the model answer; the result (the error raised if it failed)."""
        self.gate.touch()
        if self.pending is not None:
            result = self.pending.get_result()
        else:
            wait_for(lambda: self.results, "the gRPC answer")
            result = self.results[0]
            if isinstance(result, Exception):
                raise result
        self.client.close()
        return result


def check_outputs(handles: dict[str, Any]) -> None:
    total = shm.get_contents_as_numpy(handles["output0_data"], np.int32, [1, ROW])
    difference = shm.get_contents_as_numpy(handles["output1_data"], np.int32, [1, ROW])
    np.testing.assert_array_equal(total, FIRST + SECOND)
    np.testing.assert_array_equal(difference, FIRST - SECOND)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unregistered_regions_stay_until_the_requests_using_them_end(
    protocol: str, server: ServerProcess, handles: dict[str, Any], tmp_path: Path
) -> None:
    first = Gated(protocol, server, tmp_path, "first")
    with fresh(server) as client:
        client.unregister_system_shared_memory()  # no error: marked, not removed
    assert listed_everywhere(server, set(REGIONS))
    with fresh(server) as client, pytest.raises(InferenceServerException) as refused:
        client.register_system_shared_memory("output0_data", PREFIX + "output0_data", ROW_BYTES)
    assert "shared memory region 'output0_data' already in manager" in str(refused.value)

    # A request sent after the unregister uses the regions too, and holds them.
    second = Gated(protocol, server, tmp_path, "second")
    first.finish()
    check_outputs(handles)
    assert listed_everywhere(server, set(REGIONS))

    second.finish()
    check_outputs(handles)
    wait_for(lambda: listed_everywhere(server, set()), "the regions to go once both ended")
    with fresh(server) as client, pytest.raises(InferenceServerException) as gone:
        client.get_system_shared_memory_status("output0_data")
    assert "Unable to find system shared memory region: 'output0_data'" in str(gone.value)


def test_regions_used_by_no_request_go_at_once(
    server: ServerProcess, handles: dict[str, Any]
) -> None:
    with fresh(server) as client:
        client.unregister_system_shared_memory("input0_data")
    assert listed_everywhere(server, set(REGIONS) - {"input0_data"})
    with fresh(server) as client:  # its name is free again
        client.register_system_shared_memory("input0_data", PREFIX + "input0_data", ROW_BYTES)
    assert listed_everywhere(server, set(REGIONS))
