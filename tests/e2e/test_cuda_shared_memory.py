"""CUDA shared memory on a real GPU, as Triton's simple_{http,grpc}_cudashm_client.py use it.

Runs where a GPU and tritonclient's CUDA utilities (the cuda-python package) are
present, and is skipped elsewhere; without a GPU, test_shared_memory.py checks the
clean-up calls and tests/unit/test_shm_cuda.py the region logic with a fake CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import tests.support.triton_shm  # noqa: F401 (pkg_resources for tritonclient's utilities)
from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

try:
    import tritonclient.utils.cuda_shared_memory as cudashm
except (ImportError, RuntimeError):  # RuntimeError: cuda-python is not installed
    pytest.skip("tritonclient's CUDA utilities need cuda-python", allow_module_level=True)

ROW = 16
ROW_BYTES = ROW * 4


@pytest.fixture(scope="module")
def gpu_regions() -> Iterator[dict[str, Any]]:
    """Four device allocations of ROW_BYTES on GPU 0, destroyed after the module."""
    try:
        made = {name: cudashm.create_shared_memory_region(name, ROW_BYTES, 0)
                for name in ("input0", "input1", "output0", "output1")}  # fmt: skip
    except cudashm.CudaSharedMemoryException as error:
        pytest.skip(f"no GPU to allocate on: {error}")
    yield made
    for handle in made.values():
        cudashm.destroy_shared_memory_region(handle)


@pytest.fixture(scope="module", params=[0, 2], ids=["in-process", "2-workers"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("cudashm")
    add_custom_model(repository, "simple", "AddSub")
    settings = {"shared_memory_enabled": True, "parallel_workers": request.param}
    with start_server(repository, settings) as process:
        yield process


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[Any]:
    if request.param == "http":
        made: Any = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    else:
        made = grpcclient.InferenceServerClient(server.grpc_address)
    yield made
    made.unregister_cuda_shared_memory()
    made.close()


def test_tritons_cudashm_example(client: Any, gpu_regions: dict[str, Any]) -> None:
    lib = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    first = np.arange(ROW, dtype=np.int32)
    second = np.ones(ROW, dtype=np.int32)
    cudashm.set_shared_memory_region(gpu_regions["input0"], [first])
    cudashm.set_shared_memory_region(gpu_regions["input1"], [second])
    for name, handle in gpu_regions.items():
        client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, ROW_BYTES)
    inputs = [lib.InferInput(f"INPUT{i}", [1, ROW], "INT32") for i in range(2)]
    outputs = [lib.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    for index in range(2):
        inputs[index].set_shared_memory(f"input{index}", ROW_BYTES)
        outputs[index].set_shared_memory(f"output{index}", ROW_BYTES)
    client.infer("simple", inputs, outputs=outputs)
    total = cudashm.get_contents_as_numpy(gpu_regions["output0"], np.int32, [1, ROW])
    difference = cudashm.get_contents_as_numpy(gpu_regions["output1"], np.int32, [1, ROW])
    np.testing.assert_array_equal(total[0], first + second)
    np.testing.assert_array_equal(difference[0], first - second)
    status = client.get_cuda_shared_memory_status()
    names = {r["name"] for r in status} if isinstance(status, list) else set(status.regions)
    assert names == set(gpu_regions)


def test_a_region_larger_than_its_allocation_is_refused(
    client: Any, gpu_regions: dict[str, Any]
) -> None:
    raw = cudashm.get_raw_handle(gpu_regions["input0"])
    with pytest.raises(InferenceServerException, match="more than the") as raised:
        client.register_cuda_shared_memory("too-big", raw, 0, 1 << 30)
    assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
