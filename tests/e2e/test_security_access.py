"""Restricted API groups end to end: tritonclient (HTTP and gRPC) and plain clients.

One server restricts every API group it serves: ``model_repository`` and
``statistics`` need the ``admin-key`` header (keys in a file, rotated while it
runs), ``health``, ``metadata`` and ``inference`` need ``user-key`` (keys in an
environment variable). Every group is called without the header (403 /
PERMISSION_DENIED), with a wrong value, then with an accepted one (success).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .across_processes import BOTH_WAYS

ADMIN, USER = "admin-key", "user-key"
USER_KEYS = "user-1, user-2"  # two keys at once: either one is accepted
DENIED_HTTP = "403"


def admin() -> dict[str, str]:
    """Headers with an accepted admin key (a new dict: tritonclient adds to the one given)."""
    return {ADMIN: "admin-old"}


def user() -> dict[str, str]:
    return {USER: "user-2"}


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "admin-keys"
    path.write_text("admin-old\n")
    return path


@pytest.fixture(scope="module", params=BOTH_WAYS)
def guarded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, keys_file: Path
) -> Iterator[ServerProcess]:
    """The restrictions hold on every protocol process, and each reads a rotated key."""
    repository = tmp_path_factory.mktemp("guarded")
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "tokens", "Tokens")
    add_custom_model(repository, "idle", "Echo")
    restrictions = [
        {"apis": ["model_repository", "statistics"], "header": ADMIN,
         "values_from_file": str(keys_file)},
        # Triton's spelling of the group names is accepted too.
        {"apis": ["health", "metadata", "inference"], "header": "User-Key",
         "values_from_env": "TEST_USER_KEYS"},
    ]  # fmt: skip
    process = start_server(
        repository,
        {"restricted_apis": restrictions, **request.param},
        env={"TEST_USER_KEYS": USER_KEYS},
        wait=None,
    )
    try:
        with httpx.Client(base_url=process.url, timeout=5) as http:
            wait_for(lambda: _ready(process, http), "the guarded server to be ready", 60)
    except BaseException:
        process.stop()
        raise
    yield process
    process.stop()


def _ready(process: ServerProcess, http: httpx.Client) -> bool:
    if process.process.poll() is not None:
        raise RuntimeError(f"the server exited:\n{process.log()}")
    try:
        return http.get("/v2/health/ready", headers=user()).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def http_client(guarded: ServerProcess) -> Iterator[triton_http.InferenceServerClient]:
    client = triton_http.InferenceServerClient(f"127.0.0.1:{guarded.http_port}")
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc_client(guarded: ServerProcess) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(guarded.grpc_address) as client:
        yield client


def refused(call: Callable[..., Any], status: str, header: str, **kwargs: Any) -> str:
    """The message of the refusal ``call`` gets; fails unless it names ``header``."""
    with pytest.raises(InferenceServerException) as refusal:
        call(**kwargs)
    assert refusal.value.status() == status, refusal.value
    assert header in refusal.value.message()
    return str(refusal.value.message())


def triton_inputs(module: Any) -> list[Any]:
    tensor = module.InferInput("x", [1], "INT32")
    tensor.set_data_from_numpy(np.array([7], dtype=np.int32))
    return [tensor]


# ---- tritonclient over HTTP -------------------------------------------------------


def test_http_health_needs_the_user_key(http_client: triton_http.InferenceServerClient) -> None:
    # tritonclient reads any answer but 200 as "not live / not ready".
    assert not http_client.is_server_live()
    assert not http_client.is_server_ready(headers={USER: "user-3"})
    assert not http_client.is_model_ready("echo")
    assert http_client.is_server_live(headers=user())
    assert http_client.is_server_ready(headers={USER: "user-1"})
    assert http_client.is_model_ready("echo", headers=user())


def test_http_metadata_and_inference_need_the_user_key(
    http_client: triton_http.InferenceServerClient,
) -> None:
    for call, kwargs in (
        (http_client.get_server_metadata, {}),
        (http_client.get_model_metadata, {"model_name": "echo"}),
        (http_client.infer, {"model_name": "echo", "inputs": triton_inputs(triton_http)}),
    ):
        message = refused(call, DENIED_HTTP, USER, **kwargs)
        assert "send the header" in message
        message = refused(call, DENIED_HTTP, USER, headers={USER: "admin-old"}, **kwargs)
        assert "not accepted" in message
    assert http_client.get_server_metadata(headers=user())["name"] == "inferd"
    assert http_client.get_model_metadata("echo", headers=user())["name"] == "echo"
    result = http_client.infer("echo", triton_inputs(triton_http), headers=user())
    assert result.as_numpy("x").tolist() == [7]


def test_http_repository_and_statistics_need_the_admin_key(
    http_client: triton_http.InferenceServerClient,
) -> None:
    for call, kwargs in (
        (http_client.get_model_repository_index, {}),
        (http_client.load_model, {"model_name": "idle"}),
        (http_client.unload_model, {"model_name": "idle"}),
        (http_client.get_inference_statistics, {}),
    ):
        refused(call, DENIED_HTTP, ADMIN, **kwargs)
        refused(call, DENIED_HTTP, ADMIN, headers=user(), **kwargs)  # the other group's key
    http_client.load_model("idle", headers=admin())
    names = {entry["name"] for entry in http_client.get_model_repository_index(headers=admin())}
    assert {"echo", "idle", "tokens"} <= names
    stats = http_client.get_inference_statistics("echo", headers=admin())
    assert stats["model_stats"][0]["name"] == "echo"
    http_client.unload_model("idle", headers=admin())


def test_rest_routes_outside_tritonclient_follow_their_groups(guarded: ServerProcess) -> None:
    """Streaming and generate (inference), docs (metadata), per-model statistics."""
    infer_body = {"inputs": [{"name": "n", "datatype": "INT32", "shape": [1], "data": [2]}]}
    generate_body = {"text_input": "hi", "parameters": {"count": 2}}
    with httpx.Client(base_url=guarded.url, timeout=30) as http:
        for method, path, body, key in (
            ("POST", "/v2/models/tokens/infer_stream", infer_body, user()),
            ("POST", "/v2/models/tokens/generate_stream", generate_body, user()),
            ("GET", "/v2/docs", None, user()),
            ("GET", "/v2/models/echo/docs/dataplane.json", None, user()),
            ("GET", "/v2/models/echo/stats", None, admin()),
        ):
            denied = http.request(method, path, json=body)
            assert denied.status_code == 403, (path, denied.text)
            assert set(denied.json()) == {"error"}
            allowed = http.request(method, path, json=body, headers=key)
            assert allowed.status_code == 200, (path, allowed.text)


# ---- tritonclient over gRPC ---------------------------------------------------------


def test_grpc_every_group_needs_its_key(grpc_client: triton_grpc.InferenceServerClient) -> None:
    denied = "StatusCode.PERMISSION_DENIED"
    user_calls: list[tuple[Callable[..., Any], dict[str, Any]]] = [
        (grpc_client.is_server_live, {}),
        (grpc_client.is_server_ready, {}),
        (grpc_client.is_model_ready, {"model_name": "echo"}),
        (grpc_client.get_server_metadata, {}),
        (grpc_client.get_model_metadata, {"model_name": "echo"}),
        (grpc_client.infer, {"model_name": "echo", "inputs": triton_inputs(triton_grpc)}),
    ]
    admin_calls: list[tuple[Callable[..., Any], dict[str, Any]]] = [
        (grpc_client.get_model_repository_index, {}),
        (grpc_client.load_model, {"model_name": "idle"}),
        (grpc_client.unload_model, {"model_name": "idle"}),
        (grpc_client.get_inference_statistics, {}),
    ]
    for header, calls in ((USER, user_calls), (ADMIN, admin_calls)):
        for call, kwargs in calls:
            refused(call, denied, header, **kwargs)
            refused(call, denied, header, headers={header: "guess"}, **kwargs)
    assert grpc_client.is_server_live(headers=user())
    assert grpc_client.is_model_ready("echo", headers=user())
    assert grpc_client.get_server_metadata(headers=user()).name == "inferd"
    result = grpc_client.infer("echo", triton_inputs(triton_grpc), headers=user())
    assert result.as_numpy("x").tolist() == [7]
    grpc_client.load_model("idle", headers=admin())
    grpc_client.unload_model("idle", headers=admin())
    assert grpc_client.get_inference_statistics("echo", headers=admin()).model_stats


def test_grpc_stream_health_and_reflection_follow_their_groups(guarded: ServerProcess) -> None:
    metadata = tuple(user().items())
    with grpc.insecure_channel(guarded.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest(model_name="echo")
        request.inputs.add(name="x", datatype="INT32", shape=[1]).contents.int_contents.append(7)
        with pytest.raises(grpc.RpcError) as refusal:
            list(stub.ModelStreamInfer(iter([request]), timeout=30))
        assert refusal.value.code() is grpc.StatusCode.PERMISSION_DENIED
        answers = list(stub.ModelStreamInfer(iter([request]), metadata=metadata, timeout=30))
        assert [answer.error_message for answer in answers] == [""]

        health = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as refusal:
            health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert refusal.value.code() is grpc.StatusCode.PERMISSION_DENIED
        status = health.Check(health_pb2.HealthCheckRequest(service=""), metadata=metadata)
        assert status.status == health_pb2.HealthCheckResponse.SERVING

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as refusal:
            list(reflection.ServerReflectionInfo(iter([ask]), timeout=30))
        assert refusal.value.code() is grpc.StatusCode.PERMISSION_DENIED
        (listed,) = reflection.ServerReflectionInfo(iter([ask]), metadata=metadata, timeout=30)
        assert listed.list_services_response.service


# ---- key rotation -----------------------------------------------------------------------


def test_a_rotated_key_is_accepted_alongside_the_old_one_then_alone(
    guarded: ServerProcess, keys_file: Path
) -> None:
    def index_status(key: str) -> int:
        with httpx.Client(base_url=guarded.url, timeout=10) as http:
            return http.post("/v2/repository/index", headers={ADMIN: key}).status_code

    assert (index_status("admin-old"), index_status("admin-new")) == (200, 403)
    keys_file.write_text("admin-old,admin-new\n")  # the new key, next to the old one
    wait_for(lambda: index_status("admin-new") == 200, "the new key to be accepted", 10)
    assert index_status("admin-old") == 200
    keys_file.write_text("admin-new\n")  # every client has moved: the old one goes
    wait_for(lambda: index_status("admin-old") == 403, "the old key to be refused", 10)
    assert index_status("admin-new") == 200
    keys_file.write_text("admin-old\n")  # as the other tests expect it
    wait_for(lambda: index_status("admin-old") == 200, "the first key to be back", 10)


def test_a_restriction_whose_keys_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    restriction = {"apis": ["inference"], "header": "k", "values_from_env": "TEST_NO_SUCH_KEYS"}
    process = start_server(tmp_path, {"restricted_apis": [restriction]}, wait=None)
    try:
        wait_for(lambda: process.process.poll() is not None, "the server to exit", 60, 0.05)
        assert process.process.returncode not in (None, 0)
        assert "environment variable TEST_NO_SUCH_KEYS is not set" in process.log()
    finally:
        process.stop()
