"""What KServe does with a ServingRuntime, without a cluster.

- ``render_env``: the container's environment as KServe gives it to the pod: its
  ``{{.Name}}`` and ``{{.Labels.X}}`` templates filled from the InferenceService
  (a missing label renders as "", as Go's text/template does for a
  ``map[string]string``), plus what KServe injects for its kserve-mlserver runtime.
- ``model_class``: the ``modelClass`` label KServe sets for kserve-mlserver.
- ``apply_json6902``: the overlay's patch applied as kustomize applies a JSON 6902
  patch (add, replace, remove), for when ``kubectl kustomize`` cannot fetch the
  stock runtime (no network).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KSERVE = ROOT / "deploy" / "kserve"
# A stand-in for KServe's stock kserve-mlserver runtime (the fields the overlay
# patches, as KServe releases ship them); the overlay fetches the real one.
STOCK_MLSERVER_RUNTIME = Path(__file__).parent / "kserve_mlserver_stock.yaml"

_TEMPLATE = re.compile(r"\{\{\s*\.(Name|Namespace|Labels\.(\w+)|Annotations\.(\w+))\s*\}\}")


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def model_class(model_format: str) -> str:
    """The modelClass label KServe puts on an InferenceService run by kserve-mlserver:
    its four MLServer classes, and scikit-learn's for every other format."""
    return {
        "xgboost": "mlserver_xgboost.XGBoostModel",
        "lightgbm": "mlserver_lightgbm.LightGBMModel",
        "mlflow": "mlserver_mlflow.MLflowRuntime",
    }.get(model_format, "mlserver_sklearn.SKLearnModel")


def render_env(
    runtime: dict[str, Any],
    name: str,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    injected: dict[str, str] | None = None,
) -> dict[str, str]:
    """The first container's environment, templates filled in, ``injected`` added
    where the runtime does not set the variable (KServe's AppendEnvVarIfNotExists)."""
    labels = labels or {}

    def fill(match: re.Match[str]) -> str:
        if match.group(1) == "Name":
            return name
        if match.group(1) == "Namespace":
            return namespace
        if match.group(2):
            return labels.get(match.group(2), "")
        return ""

    container = runtime["spec"]["containers"][0]
    env = {
        item["name"]: _TEMPLATE.sub(fill, str(item.get("value", ""))) for item in container["env"]
    }
    for key, value in (injected or {}).items():
        env.setdefault(key, value)
    return env


def mlserver_injected(name: str) -> dict[str, str]:
    """What KServe adds for a kserve-mlserver InferenceService with a storageUri."""
    return {"MLSERVER_MODEL_NAME": name, "MLSERVER_MODEL_URI": "/mnt/models"}


def apply_json6902(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """``document`` with the JSON 6902 ``operations`` applied (add, replace, remove)."""
    patched = copy.deepcopy(document)
    for operation in operations:
        *parents, last = [_unescape(part) for part in operation["path"].split("/")[1:]]
        target: Any = patched
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        op = operation["op"]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if op == "add":
                target.insert(index, copy.deepcopy(operation["value"]))
            elif op == "replace":
                target[index] = copy.deepcopy(operation["value"])
            elif op == "remove":
                del target[index]
        elif op in ("add", "replace"):
            if op == "replace" and last not in target:
                raise KeyError(f"replace: {operation['path']} does not exist")
            target[last] = copy.deepcopy(operation["value"])
        elif op == "remove":
            del target[last]
        else:
            raise ValueError(f"unsupported op {op!r}")
    return patched


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def inferd_runtime() -> dict[str, Any]:
    (runtime,) = load_yaml(KSERVE / "cluster-serving-runtime.yaml")
    return runtime


def mlserver_runtime_with_inferd() -> dict[str, Any]:
    """The overlay applied to the stand-in of KServe's stock runtime: its patch, and
    its images entry (KServe's placeholder image name becomes inferd's)."""
    overlay = KSERVE / "mlserver-image"
    (kustomization,) = load_yaml(overlay / "kustomization.yaml")
    (stock,) = load_yaml(STOCK_MLSERVER_RUNTIME)
    (patch,) = kustomization["patches"]
    operations = yaml.safe_load((overlay / patch["path"]).read_text())
    patched = apply_json6902(stock, operations)
    for image in kustomization["images"]:
        for container in patched["spec"]["containers"]:
            if container["image"].split(":")[0] == image["name"]:
                container["image"] = f"{image['newName']}:{image['newTag']}"
    return patched
