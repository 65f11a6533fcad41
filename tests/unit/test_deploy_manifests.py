"""The manifests in deploy/ and the Dockerfile, checked without a cluster or a build.

- Every YAML file parses; the KServe runtime has the fields KServe needs.
- The pod and container fields validate against Kubernetes' schemas
  (kubernetes-validate), the ServingRuntime and InferenceService specs against
  KServe's SDK models (scripts/check_kserve_spec.py, in its own virtualenv:
  ``.venv-kserve``, which scripts/test.sh makes, or ``KSERVE_SDK_PYTHON``).
- ``kubectl kustomize`` renders deploy/kserve and the overlay (the overlay with the
  stand-in of KServe's stock runtime in place of the release it fetches); the
  overlay's patch applied in Python gives the same.
- The Dockerfile keeps its rules: numeric user, exec-form CMD, no model files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.kserve import (
    KSERVE,
    ROOT,
    STOCK_MLSERVER_RUNTIME,
    inferd_runtime,
    load_yaml,
    mlserver_runtime_with_inferd,
    render_env,
)

KUBERNETES_VERSION = "1.30"
DEPLOY_YAML = sorted((ROOT / "deploy").rglob("*.yaml"))


@pytest.mark.parametrize("path", DEPLOY_YAML, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_manifest_parses(path: Path) -> None:
    assert yaml.safe_load_all(path.read_text())


def test_the_inferd_runtime_has_what_kserve_needs() -> None:
    runtime = inferd_runtime()
    assert (runtime["apiVersion"], runtime["kind"]) == (
        "serving.kserve.io/v1alpha1",
        "ClusterServingRuntime",
    )
    spec = runtime["spec"]
    formats = {(f["name"], f["version"], f["autoSelect"]) for f in spec["supportedModelFormats"]}
    assert {name for name, _, _ in formats} == {"sklearn", "xgboost", "lightgbm", "mlflow", "onnx"}
    assert all(auto for _, _, auto in formats)
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"  # KServe merges the predictor into it
    env = render_env(runtime, "my-model", labels={"modelClass": "mlserver_xgboost.XGBoostModel"})
    assert env["MLSERVER_MODEL_IMPLEMENTATION"] == "mlserver_xgboost.XGBoostModel"
    assert (env["MLSERVER_HTTP_PORT"], env["MLSERVER_GRPC_PORT"]) == ("8080", "9000")
    assert (env["MLSERVER_MODEL_NAME"], env["MLSERVER_MODEL_URI"]) == ("my-model", "/mnt/models")
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert spec["annotations"]["prometheus.kserve.io/port"] == env["MLSERVER_METRICS_PORT"]
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["capabilities"]["drop"] == ["ALL"]


def as_pod(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "inferd"},
        "spec": {"containers": [container]},
    }


def runtime_containers() -> list[tuple[str, dict[str, Any]]]:
    found = [
        ("kserve-inferd", inferd_runtime()["spec"]["containers"][0]),
        ("kserve-mlserver + inferd", mlserver_runtime_with_inferd()["spec"]["containers"][0]),
    ]
    for path in sorted((KSERVE / "examples").glob("*.yaml")):
        for doc in load_yaml(path):
            model = dict(doc["spec"]["predictor"]["model"])
            # The predictor's container fields (ports, env, ...) beside KServe's own.
            for kserve_field in ("modelFormat", "runtime", "protocolVersion", "storageUri"):
                model.pop(kserve_field, None)
            found.append((path.name, {"name": "kserve-container", **model}))
    return found


@pytest.mark.parametrize(("what", "container"), runtime_containers(), ids=lambda x: str(x)[:40])
def test_containers_validate_against_kubernetes_schemas(
    what: str, container: dict[str, Any]
) -> None:
    try:
        kubernetes_validate.validate(as_pod(container), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{what}: {str(error).splitlines()[0]}")


def test_kubernetes_validation_catches_a_wrong_field() -> None:
    container = {**inferd_runtime()["spec"]["containers"][0], "readinesProbe": {}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(as_pod(container), KUBERNETES_VERSION, strict=True)


# ---- kustomize ----


def kustomize(folder: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the overlay's patch is checked in Python only")
    result = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kubectl_kustomize_renders_the_runtime() -> None:
    (rendered,) = kustomize(KSERVE)
    assert rendered == inferd_runtime()


def test_the_overlay_patches_kserve_mlserver_runtime_as_kubectl_does(tmp_path: Path) -> None:
    """The overlay with the stand-in of KServe's stock runtime as its resource."""
    overlay = tmp_path / "overlay"
    shutil.copytree(KSERVE / "mlserver-image", overlay)
    shutil.copy(STOCK_MLSERVER_RUNTIME, overlay / "kserve-mlserver.yaml")
    text = (overlay / "kustomization.yaml").read_text()
    text, replaced = re.subn(r"- https://\S+kserve-mlserver\.yaml", "- kserve-mlserver.yaml", text)
    assert replaced == 1
    (overlay / "kustomization.yaml").write_text(text)
    (rendered,) = kustomize(overlay)
    assert rendered == mlserver_runtime_with_inferd()


def test_the_overlay_puts_inferd_into_kserve_mlserver_runtime() -> None:
    runtime = mlserver_runtime_with_inferd()
    assert runtime["metadata"]["name"] == "kserve-mlserver"
    (container,) = runtime["spec"]["containers"]
    assert container["image"] == "inferd:latest"
    assert {"name": "onnx", "version": "1", "autoSelect": True, "priority": 2} in runtime["spec"][
        "supportedModelFormats"
    ]
    assert runtime["spec"]["protocolVersions"] == ["v2", "grpc-v2"]
    env = render_env(runtime, "m")
    annotations = runtime["spec"]["annotations"]
    assert env["MLSERVER_METRICS_PORT"] == annotations["prometheus.kserve.io/port"]
    assert container["readinessProbe"]["httpGet"]["port"] == int(env["MLSERVER_HTTP_PORT"])


# ---- KServe's SDK ----


def kserve_python() -> str:
    configured = os.environ.get("KSERVE_SDK_PYTHON")
    if configured:
        return configured
    local = ROOT / ".venv-kserve" / "bin" / "python"
    if not local.exists():
        pytest.skip("no KServe SDK virtualenv (.venv-kserve; scripts/test.sh makes it)")
    return str(local)


def run_kserve_check(*paths: Path) -> subprocess.CompletedProcess[str]:
    script = ROOT / "scripts" / "check_kserve_spec.py"
    return subprocess.run(
        [kserve_python(), str(script), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_runtime_and_examples_match_kserve_sdk_models(tmp_path: Path) -> None:
    patched = tmp_path / "kserve-mlserver-with-inferd.yaml"
    patched.write_text(yaml.safe_dump(mlserver_runtime_with_inferd()))
    examples = sorted((KSERVE / "examples").glob("*.yaml"))
    result = run_kserve_check(KSERVE / "cluster-serving-runtime.yaml", patched, *examples)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"checked {2 + len(examples)} file(s): 0 problem(s)" in result.stdout


def test_the_kserve_check_finds_a_misspelt_field(tmp_path: Path) -> None:
    runtime = inferd_runtime()
    runtime["spec"]["protocolVersion"] = runtime["spec"].pop("protocolVersions")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(runtime))
    result = run_kserve_check(bad)
    assert result.returncode == 1
    assert "spec.protocolVersion: not a field of V1alpha1ServingRuntimeSpec" in result.stdout


# ---- the Dockerfile ----


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return instructions[last_from:]


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    users = [arg for op, arg in final_stage() if op == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*(:0)?", users[-1]), users


def test_the_image_command_is_exec_form_inferd_start() -> None:
    (command,) = [arg for op, arg in final_stage() if op == "CMD"]
    assert command == '["inferd", "start"]'  # PID 1 is inferd: SIGTERM reaches it
    assert not [arg for op, arg in final_stage() if op == "ENTRYPOINT"]


def test_the_image_serves_mnt_models_with_a_writable_home_for_any_uid_in_group_0() -> None:
    env = " ".join(arg for op, arg in final_stage() if op == "ENV")
    assert "MLSERVER_MODELS_DIR=/mnt/models" in env
    assert "HOME=/home/inferd" in env
    run = " ".join(arg for op, arg in final_stage() if op == "RUN")
    assert "chown -R 1000:0 /home/inferd" in run
    assert "chmod -R g=u /home/inferd" in run


def test_the_image_copies_no_model_files() -> None:
    copies = [arg for op, arg in dockerfile_instructions() if op in ("COPY", "ADD")]
    allowed = {"pyproject.toml", "README.md", "./", "src", "./src", "/opt/inferd"}
    for copy in copies:
        sources = [part for part in copy.split()[:-1] if not part.startswith("--")]
        assert set(sources) <= allowed, copy
    assert not [op for op, _ in dockerfile_instructions() if op == "ADD"]
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignored[ignored.index("*")] == "*"  # the build context is what is allowed back


def test_the_image_extras_are_a_build_argument_defaulting_to_kserve_mlserver_formats() -> None:
    args = [arg for op, arg in dockerfile_instructions() if op == "ARG"]
    assert "EXTRAS=sklearn,xgboost,lightgbm,mlflow" in args
    run = " ".join(arg for op, arg in dockerfile_instructions() if op == "RUN")
    assert '".[${EXTRAS}]"' in run


# ---- plain Kubernetes ----


@pytest.mark.parametrize(
    "document",
    load_yaml(ROOT / "deploy" / "kubernetes" / "inferd.yaml"),
    ids=lambda doc: str(doc["kind"]),
)
def test_plain_kubernetes_manifests_validate(document: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{document['kind']}: {str(error).splitlines()[0]}")
