"""Server metadata lists exactly the extensions the server serves with its settings,
over REST (``GET /v2``) and gRPC (``ServerMetadata``), and each one listed answers.
``cuda_shared_memory`` is expected where shared memory is on and this machine's CUDA
runtime sees a GPU (the server runs here, so it sees the same)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton_grpc

from inferd.triton.shm import SharedMemoryRegistry
from tests.support.serverproc import ServerProcess

ALWAYS = (
    "classification",
    "sequence",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
    "generate",
)
REPOSITORY = ("model_repository", "model_repository(unload_dependents)")
# A call of each extension that has routes of its own: 200 when served.
PROBES = {
    "model_repository": ("POST", "/v2/repository/index"),
    # (its status calls answer either way, listing no region while it is off, as Triton's)
    "system_shared_memory": ("POST", "/v2/systemsharedmemory/unregister"),
    "statistics": ("GET", "/v2/models/stats"),
    "logging": ("GET", "/v2/logging"),
    "trace": ("GET", "/v2/trace/setting"),
}


@pytest.mark.parametrize(
    ("settings", "optional"),
    [
        ({}, {*REPOSITORY}),
        ({"shared_memory_enabled": True}, {*REPOSITORY, "system_shared_memory"}),
        ({"shared_memory_enabled": False, "model_repository_api": False}, set()),
        ({"shared_memory_enabled": True, "model_repository_api": False}, {"system_shared_memory"}),
    ],
    ids=["defaults", "shm-on", "shm-off-repository-off", "shm-on-repository-off"],
)
def test_metadata_lists_what_the_settings_serve(
    tmp_path: Path,
    start: Callable[..., ServerProcess],
    settings: dict[str, Any],
    optional: set[str],
) -> None:
    if settings.get("shared_memory_enabled") and SharedMemoryRegistry().serves_cuda():
        optional = optional | {"cuda_shared_memory"}
    server = start(tmp_path, settings=settings)
    rest = httpx.get(f"{server.url}/v2", timeout=10).json()["extensions"]
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        grpc = list(client.get_server_metadata().extensions)
    assert rest == grpc
    assert set(rest) == set(ALWAYS) | optional and len(rest) == len(set(rest))
    for extension, (method, path) in PROBES.items():
        status = httpx.request(method, f"{server.url}{path}", timeout=10).status_code
        assert (status == 200) == (extension in rest), (extension, status)


def test_the_settings_extensions_are_listed_too(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    server = start(tmp_path, settings={"extensions": ["my_extension", "statistics"]})
    listed = httpx.get(f"{server.url}/v2", timeout=10).json()["extensions"]
    assert listed[-1] == "my_extension" and listed.count("statistics") == 1
