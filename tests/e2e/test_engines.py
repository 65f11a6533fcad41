"""inferd started exactly as KServe, ModelMesh and Seldon Core v2 start it, without a cluster.

Each test builds the environment the engine gives the container (KServe's from the
runtime manifest in deploy/kserve, templates filled in; the image's own ENV from
the Dockerfile), runs ``inferd start`` with no folder argument as the image does,
and talks to it as the engine and its clients do. Ports are free ones in place of
the manifest's fixed ones, which the tests check go together (probes, annotations).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferd.settings.runtime_names import MLSERVER_SKLEARN
from tests.support.kserve import (
    ROOT,
    inferd_runtime,
    mlserver_injected,
    mlserver_runtime_with_inferd,
    model_class,
    render_env,
)
from tests.support.models import add_custom_model, train_iris, write_model_folder
from tests.support.serverproc import ServerProcess, free_ports, server_environment, spawn

from .runtime_models import add_and_multiply_graph


def image_env() -> dict[str, str]:
    """The ENV lines of the Dockerfile that name inferd's (MLSERVER_) settings."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found = dict(re.findall(r"(MLSERVER_\w+)=(\S+)", text))
    assert found["MLSERVER_MODELS_DIR"] == "/mnt/models"
    return found


def start_inferd(env: dict[str, str], cwd: Path, log: Path) -> ServerProcess:
    """``inferd start`` with no argument (the image's CMD) in ``env`` alone."""
    ports = (int(env["MLSERVER_HTTP_PORT"]), int(env["MLSERVER_GRPC_PORT"]))
    metrics = int(env.get("MLSERVER_METRICS_PORT", "8082"))
    return spawn(
        [sys.executable, "-m", "inferd", "start"],
        repository=Path(env.get("MLSERVER_MODELS_DIR", ".")),
        log_path=log,
        ports=(*ports, metrics),
        env=server_environment(env),
        cwd=cwd,
    )


def with_free_ports(env: dict[str, str]) -> tuple[dict[str, str], dict[int, int]]:
    """``env`` with its fixed ports swapped for free ones, and the swap (fixed -> free)."""
    names = ("MLSERVER_HTTP_PORT", "MLSERVER_GRPC_PORT", "MLSERVER_METRICS_PORT")
    swap = dict(zip((int(env.get(name, "8082")) for name in names), free_ports(3), strict=True))
    return {**env, **{name: str(swap[int(env.get(name, "8082"))]) for name in names}}, swap


def read_only_models(tmp_path: Path, files: dict[str, Any]) -> Path:
    """A /mnt/models-style folder: the artifacts in a read-only folder elsewhere
    (a PVC, the storage initializer's download), reached through a symlink."""
    store = tmp_path / "pvc" / "model"
    store.mkdir(parents=True)
    for name, write in files.items():
        write(store / name)
        (store / name).chmod(0o444)
    store.chmod(0o555)
    (tmp_path / "mnt").mkdir()
    (tmp_path / "mnt" / "models").symlink_to(store, target_is_directory=True)
    return tmp_path / "mnt" / "models"


def snapshot(folder: Path) -> list[tuple[str, int, float]]:
    """Every name under ``folder`` (links followed) with its size and mtime."""
    return sorted(
        (str(path.relative_to(folder)), path.stat().st_size, path.stat().st_mtime)
        for path in folder.rglob("*")
    )


@pytest.fixture
def stop_later() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.stop()


def check_probes_and_metrics(
    server: ServerProcess, runtime: dict[str, Any], env: dict[str, str], swap: dict[int, int]
) -> None:
    """The runtime's probes on its container's ports, metrics on the annotated port."""
    container = runtime["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert str(get["port"]) == str(swap_back(swap, env["MLSERVER_HTTP_PORT"]))
        server.wait_until(get["path"], port=swap[int(get["port"])])
    annotations = runtime["spec"]["annotations"]
    metrics_port = swap[int(annotations["prometheus.kserve.io/port"])]
    assert annotations["prometheus.io/port"] == annotations["prometheus.kserve.io/port"]
    scraped = httpx.get(
        f"http://127.0.0.1:{metrics_port}{annotations['prometheus.kserve.io/path']}"
    )
    assert scraped.status_code == 200
    assert "model_infer_request_success" in scraped.text


def swap_back(swap: dict[int, int], free: str) -> int:
    return next(fixed for fixed, port in swap.items() if port == int(free))


def grpc_health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status)


# ---- KServe ----


def test_kserve_inferd_runtime_serves_a_read_only_linked_model(
    tmp_path: Path, stop_later: list[ServerProcess], iris_features: np.ndarray
) -> None:
    """kserve-inferd: no modelClass label (KServe sets it only for kserve-mlserver),
    so ``{{.Labels.modelClass}}`` is "" and the runtime is told from the files."""
    models = read_only_models(tmp_path, {"model.joblib": train_iris})
    runtime = inferd_runtime()
    rendered = render_env(runtime, "sklearn-iris", labels={})
    assert rendered["MLSERVER_MODEL_IMPLEMENTATION"] == ""
    assert rendered["MLSERVER_MODEL_NAME"] == "sklearn-iris"
    # Knative's own variables come too; inferd must not mind them.
    env = {**image_env(), **rendered, "PORT": "8080", "K_SERVICE": "sklearn-iris-predictor"}
    env = {key: value.replace("/mnt/models", str(models)) for key, value in env.items()}
    env, swap = with_free_ports(env)
    before = snapshot(models)
    home = tmp_path / "home"
    home.mkdir()
    server = start_inferd({**env, "HOME": str(home)}, home, tmp_path / "kserve.log")
    stop_later.append(server)
    server.wait_until()

    rows = iris_features[:3].astype(np.float32)
    body = {
        "inputs": [
            {"name": "input-0", "shape": [3, 4], "datatype": "FP32", "data": rows.ravel().tolist()}
        ]
    }
    answer = httpx.post(f"{server.url}/v2/models/sklearn-iris/infer", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["shape"] == [3, 1]
    with tritonclient.grpc.InferenceServerClient(server.grpc_address) as client:
        tensor = tritonclient.grpc.InferInput("input-0", [3, 4], "FP32")
        tensor.set_data_from_numpy(rows)
        result = client.infer("sklearn-iris", [tensor])
        assert result.as_numpy("predict").shape == (3, 1)
    assert grpc_health(server.grpc_address) == health_pb2.HealthCheckResponse.SERVING
    check_probes_and_metrics(server, runtime, env, swap)
    assert snapshot(models) == before  # nothing written into the model's folder
    assert "inferd.runtimes.sklearn.SKLearnModel chosen from the files" in server.log()
    assert server.stop() == 0


def test_kserve_mlserver_runtime_with_inferd_image_serves_onnx(
    tmp_path: Path, stop_later: list[ServerProcess]
) -> None:
    """kserve-mlserver with inferd's image (the overlay): KServe labels an ONNX model
    with its scikit-learn fallback class; inferd serves it with its ONNX runtime."""
    onnx = pytest.importorskip("onnx")
    models = read_only_models(
        tmp_path, {"model.onnx": lambda path: onnx.save(add_and_multiply_graph(), str(path))}
    )
    runtime = mlserver_runtime_with_inferd()
    assert runtime["spec"]["containers"][0]["image"] == "inferd:latest"
    labels = {"modelClass": model_class("onnx")}
    rendered = render_env(runtime, "onnx-sums", labels, injected=mlserver_injected("onnx-sums"))
    assert rendered["MLSERVER_MODEL_IMPLEMENTATION"] == "mlserver_sklearn.SKLearnModel"
    env = {**image_env(), **rendered}
    env = {key: value.replace("/mnt/models", str(models)) for key, value in env.items()}
    env["MLSERVER_PARALLEL_WORKERS"] = "0"  # cpu_count is tested elsewhere: keep this one light
    env, swap = with_free_ports(env)
    server = start_inferd(env, tmp_path, tmp_path / "kserve-mlserver.log")
    stop_later.append(server)
    server.wait_until()

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with tritonclient.grpc.InferenceServerClient(server.grpc_address) as client:
        inputs = []
        for name in ("a", "b"):
            tensor = tritonclient.grpc.InferInput(name, [2, 3], "FP32")
            tensor.set_data_from_numpy(a)
            inputs.append(tensor)
        result = client.infer("onnx-sums", inputs)
        np.testing.assert_array_equal(result.as_numpy("sum"), a + a)
    check_probes_and_metrics(server, runtime, env, swap)


# ---- ModelMesh ----


def modelmesh_env(models_dir: Path) -> dict[str, str]:
    """What ModelMesh's MLServer runtime sets (its adapter drives the repository API)."""
    http, grpc_port, metrics = free_ports(3)
    return {
        "MLSERVER_MODELS_DIR": str(models_dir),
        "MLSERVER_GRPC_PORT": str(grpc_port),
        "MLSERVER_HTTP_PORT": str(http),
        "MLSERVER_METRICS_PORT": str(metrics),
        "MLSERVER_LOAD_MODELS_AT_STARTUP": "false",
        "MLSERVER_MODEL_NAME": "dummy-model-fixme",
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_GRPC_MAX_MESSAGE_LENGTH": "-1",
        "MLSERVER_PARALLEL_WORKERS": "1",
    }


def adapter_writes_model(models_dir: Path, model_id: str, store: Path) -> None:
    """As ModelMesh's adapter: a folder per model id, a model-settings.json, and the
    artifact linked from where the puller put it."""
    artifact = models_dir / model_id / "model.joblib"
    artifact.parent.mkdir(parents=True)
    artifact.symlink_to(store)
    parameters = {"uri": str(artifact)}
    write_model_folder(models_dir, model_id, MLSERVER_SKLEARN, parameters=parameters)


def test_modelmesh_starts_without_its_folder_and_loads_over_grpc(
    tmp_path: Path, stop_later: list[ServerProcess], iris_features: np.ndarray
) -> None:
    models_dir = tmp_path / "models" / "_mlserver_models"  # the adapter creates it later
    env = modelmesh_env(models_dir)
    server = start_inferd(env, tmp_path, tmp_path / "modelmesh.log")
    stop_later.append(server)
    server.wait_until()
    assert not models_dir.exists()

    store = tmp_path / "puller" / "iris.joblib"
    store.parent.mkdir()
    train_iris(store)
    adapter_writes_model(models_dir, "iris__isvc-1", store)
    rows = iris_features[:2]
    with tritonclient.grpc.InferenceServerClient(server.grpc_address) as client:
        client.load_model("iris__isvc-1")
        index = client.get_model_repository_index(as_json=True)["models"]
        assert [(m["name"], m["state"]) for m in index] == [("iris__isvc-1", "READY")]
        tensor = tritonclient.grpc.InferInput("input-0", [2, 4], "FP64")
        tensor.set_data_from_numpy(rows)
        # -1 (unlimited) used to make every answer RESOURCE_EXHAUSTED.
        result = client.infer("iris__isvc-1", [tensor])
        assert result.as_numpy("predict").shape == (2, 1)
        client.unload_model("iris__isvc-1")
        (entry,) = client.get_model_repository_index(as_json=True)["models"]
        assert entry["state"] == "UNAVAILABLE"  # its files are there, it is not loaded
        with pytest.raises(InferenceServerException) as unknown:
            client.unload_model("never-loaded")
        assert unknown.value.status() == "StatusCode.NOT_FOUND"
    assert "dummy-model-fixme" in server.log()  # said why it serves no model at start


def test_a_huge_answer_passes_with_unlimited_grpc_messages(
    tmp_path: Path, stop_later: list[ServerProcess]
) -> None:
    """-1: a request and an answer over max_request_size (the limit without it, cut to
    1 MiB here) still pass."""
    add_custom_model(tmp_path / "repo", "echo", "Echo")
    env = modelmesh_env(tmp_path / "repo")
    env["MLSERVER_LOAD_MODELS_AT_STARTUP"] = "true"
    del env["MLSERVER_MODEL_NAME"]  # it would name the echo model (loaded at start)
    env["MLSERVER_MAX_REQUEST_SIZE"] = str(1024 * 1024)
    env["MLSERVER_PARALLEL_WORKERS"] = "0"
    server = start_inferd(env, tmp_path, tmp_path / "unlimited.log")
    stop_later.append(server)
    server.wait_until()
    big = np.zeros(600_000, dtype=np.float32)  # 2.4 MB each way
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_address, options=options) as channel:
        from inferd.protocol import pb, pb_grpc

        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest(model_name="echo")
        request.inputs.add(name="x", datatype="FP32", shape=[big.size])
        request.raw_input_contents.append(big.tobytes())
        answer = stub.ModelInfer(request, timeout=30)
        assert len(answer.raw_output_contents[0]) == big.nbytes


# ---- Seldon Core v2 ----


def test_seldon_core_v2_versioned_names_loaded_over_rest(
    tmp_path: Path, stop_later: list[ServerProcess], iris_features: np.ndarray
) -> None:
    """Seldon's agent writes each version as its own model, named ``<model>_<version>``,
    into the server's folder and loads it over the REST repository API."""
    models_dir = tmp_path / "mnt" / "agent" / "models"
    models_dir.mkdir(parents=True)
    http, grpc_port, metrics = free_ports(3)
    env = {
        "MLSERVER_MODELS_DIR": str(models_dir),
        "MLSERVER_HTTP_PORT": str(http),
        "MLSERVER_GRPC_PORT": str(grpc_port),
        "MLSERVER_METRICS_PORT": str(metrics),
        "MLSERVER_LOAD_MODELS_AT_STARTUP": "false",
        "MLSERVER_PARALLEL_WORKERS": "0",
        "MLSERVER_HOST": "127.0.0.1",
    }
    server = start_inferd(env, tmp_path, tmp_path / "seldon.log")
    stop_later.append(server)
    server.wait_until()
    for version in ("1", "2"):
        train_iris(models_dir / f"iris_{version}" / "model.joblib")
        write_model_folder(models_dir, f"iris_{version}", MLSERVER_SKLEARN)
    body = {
        "inputs": [
            {"name": "i", "shape": [1, 4], "datatype": "FP64", "data": iris_features[0].tolist()}
        ]
    }
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for name in ("iris_1", "iris_2"):
            assert client.post(f"/v2/repository/models/{name}/load").status_code == 200
            assert client.post(f"/v2/models/{name}/infer", json=body).status_code == 200
        assert client.post("/v2/repository/models/iris_1/unload").status_code == 200
        assert client.post("/v2/models/iris_1/infer", json=body).status_code == 404
        assert client.post("/v2/models/iris_2/infer", json=body).status_code == 200


# ---- parallel_workers: cpu_count in a container ----


def test_cpu_count_workers_follow_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime sets MLSERVER_PARALLEL_WORKERS=cpu_count; the settings read it
    through the cgroup quota (tests/unit/test_engine_starts.py fakes the files)."""
    from inferd.settings.cpu_quota import available_cpus
    from inferd.settings.loader import load_server_settings

    env = render_env(inferd_runtime(), "m")
    monkeypatch.setenv("MLSERVER_PARALLEL_WORKERS", env["MLSERVER_PARALLEL_WORKERS"])
    assert load_server_settings(tmp_path).parallel_workers == available_cpus()
