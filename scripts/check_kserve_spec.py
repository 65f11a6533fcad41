"""Check KServe manifests against the KServe Python SDK's models (its OpenAPI types).

    .venv-kserve/bin/python scripts/check_kserve_spec.py deploy/kserve/*.yaml ...

Every field of a ServingRuntime's or ClusterServingRuntime's ``spec`` must be a
field of the SDK's ``V1alpha1ServingRuntimeSpec`` (and so on down: containers are
Kubernetes ``V1Container``), with a value of the declared type, and each object is
built with the SDK's class (which checks required fields). InferenceServices are
checked against ``V1beta1InferenceServiceSpec``. Prints one line per problem and
exits 1 if there is any.

Runs in a virtualenv of its own holding ``kserve`` (installed without its server
dependencies), ``kubernetes`` and ``pyyaml``: the SDK's package ``__init__`` imports
its model server, so the models are imported without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

import yaml

SPECS = {
    "ServingRuntime": "V1alpha1ServingRuntimeSpec",
    "ClusterServingRuntime": "V1alpha1ServingRuntimeSpec",
    "InferenceService": "V1beta1InferenceServiceSpec",
}
PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "object": (object,),
    "datetime": (str,),
    "IntOrString": (int, str),
}


def _models() -> tuple[types.ModuleType, types.ModuleType]:
    spec = importlib.util.find_spec("kserve")
    if spec is None or spec.submodule_search_locations is None:
        raise SystemExit("the kserve package is not installed in this interpreter")
    package = types.ModuleType("kserve")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["kserve"] = package  # its models, without its model server
    return importlib.import_module("kserve.models"), importlib.import_module("kubernetes.client")


KSERVE_MODELS, KUBERNETES = _models()


def _class(name: str) -> Any:
    return getattr(KSERVE_MODELS, name, None) or getattr(KUBERNETES, name)


def check(value: Any, type_name: str, where: str, problems: list[str]) -> Any:
    """``value`` as an instance of ``type_name``; a problem for each mismatch."""
    if value is None:
        return None
    if match := re.fullmatch(r"(?:list|List)\[(.+)\]", type_name):
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list, got {value!r}")
            return None
        return [check(item, match[1], f"{where}[{i}]", problems) for i, item in enumerate(value)]
    if match := re.fullmatch(r"dict\(str, (.+)\)|Dict\[str, (.+)\]", type_name):
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a map, got {value!r}")
            return None
        item_type = match[1] or match[2]
        return {k: check(v, item_type, f"{where}.{k}", problems) for k, v in value.items()}
    if type_name in PRIMITIVES:
        if not isinstance(value, PRIMITIVES[type_name]):
            problems.append(f"{where}: expected {type_name}, got {value!r}")
        return value
    return _check_object(value, _class(type_name), where, problems)


def _check_object(value: Any, cls: Any, where: str, problems: list[str]) -> Any:
    if not isinstance(value, dict):
        problems.append(f"{where}: expected an object ({cls.__name__}), got {value!r}")
        return None
    by_json_name = {json: python for python, json in cls.attribute_map.items()}
    arguments = {}
    for key, item in value.items():
        if key not in by_json_name:
            problems.append(f"{where}.{key}: not a field of {cls.__name__}")
            continue
        python = by_json_name[key]
        arguments[python] = check(item, cls.openapi_types[python], f"{where}.{key}", problems)
    try:
        return cls(**arguments)
    except (ValueError, TypeError) as error:
        problems.append(f"{where}: {cls.__name__}: {error}")
        return None


def check_file(path: Path) -> list[str]:
    problems: list[str] = []
    for document in yaml.safe_load_all(path.read_text()):
        if not document:
            continue
        kind = document.get("kind")
        if kind not in SPECS:
            continue
        name = document.get("metadata", {}).get("name", "?")
        check(document.get("spec"), SPECS[kind], f"{path}: {kind} {name}: spec", problems)
    return problems


def main(paths: list[str]) -> int:
    problems = [problem for path in paths for problem in check_file(Path(path))]
    for problem in problems:
        print(problem)
    print(f"checked {len(paths)} file(s): {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
