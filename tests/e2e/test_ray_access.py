"""restricted_apis hold through Ray Serve's HTTP and gRPC proxies, as on inferd's ports.

One Ray node on this machine serves a repository whose settings.json restricts the
inference group (header ``api-key``) and the model repository group (header
``admin-key``); tritonclient talks to it through Ray's proxies, unchanged. Each
restricted group is refused without its key and answered with it, on both
proxies, and an unload without the admin key leaves the model ready (Ray's gRPC
entry once called the servicer without the access checks: it unloaded the model).

Marked ``ray``, as tests/e2e/test_ray.py: skipped when Ray Serve is not installed
or Ray cannot start here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.models import add_custom_model
from tests.support.serverproc import free_ports

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

SERVICER = "inferd.ray.add_inference_service"
USER_KEY, ADMIN_KEY = "user-key", "admin-key"


def user() -> dict[str, str]:
    """The inference key's header, fresh: tritonclient.http adds its own headers to it."""
    return {"api-key": USER_KEY}


def admin() -> dict[str, str]:
    return {"admin-key": ADMIN_KEY}


def write_repository(repository: Path) -> Path:
    add_custom_model(repository, "echo", "Echo")
    restricted = []
    for apis, header, value in (
        (["inference"], "api-key", USER_KEY),
        (["model_repository"], "admin-key", ADMIN_KEY),
    ):
        keys = repository.parent / f"{header}s"
        keys.write_text(value)
        restricted.append({"apis": apis, "header": header, "values_from_file": str(keys)})
    settings = {"restricted_apis": restricted, "parallel_workers": 0}
    (repository / "settings.json").write_text(json.dumps(settings))
    return repository


@pytest.fixture(scope="module")
def proxies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from inferd.ray import build

    repository = write_repository(tmp_path_factory.mktemp("ray-access") / "models")
    http_port, grpc_port = free_ports(2)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as error:  # no room for Ray here (shared memory, ports...)
        pytest.skip(f"Ray cannot start here: {error}")
    try:
        serve.start(
            http_options={"host": "127.0.0.1", "port": http_port},
            grpc_options={"port": grpc_port, "grpc_servicer_functions": [SERVICER]},
        )
        app = build({"model_repository": str(repository), "num_cpus": 0.5})
        serve.run(app, name="inferd", route_prefix="/")
        yield {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}"}
    finally:
        serve.shutdown()
        ray.shutdown()


def echo_input(module: Any) -> Any:
    tensor = module.InferInput("x", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
    return tensor


def refused(call: Any) -> str:
    """The message of the refusal ``call()`` raises."""
    with pytest.raises(InferenceServerException) as error:
        call()
    return str(error.value)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_restricted_group_is_refused_without_its_key_through_rays_proxies(
    proxies: dict[str, str], protocol: str
) -> None:
    module = tritonclient_http if protocol == "http" else tritonclient_grpc
    with module.InferenceServerClient(proxies[protocol]) as client:
        assert client.is_model_ready("echo")  # health stays open
        # inference: refused without the key, answered with it
        inputs = [echo_input(module)]
        assert "'api-key'" in refused(lambda: client.infer("echo", inputs))
        assert "'api-key'" in refused(lambda: client.infer("echo", inputs, headers=admin()))
        answer = client.infer("echo", inputs, headers=user())
        assert answer.as_numpy("x").tolist() == [[1.0, 2.0]]
        # model repository: an unauthenticated unload leaves the model ready
        assert "'admin-key'" in refused(lambda: client.unload_model("echo"))
        assert "'admin-key'" in refused(lambda: client.unload_model("echo", headers=user()))
        assert client.is_model_ready("echo")
        assert "'admin-key'" in refused(lambda: client.get_model_repository_index())
        index = client.get_model_repository_index(headers=admin())
        names = [m["name"] for m in index] if protocol == "http" else [m.name for m in index.models]
        assert names == ["echo"]
        client.load_model("echo", headers=admin())  # answered: a reload
        assert client.is_model_ready("echo")
        assert client.infer("echo", inputs, headers=user()).as_numpy("x").shape == (1, 2)
