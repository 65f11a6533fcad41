"""inferd.ray's builder arguments and deploy/ray/serve-config.yaml, without a cluster
(tests/e2e/test_ray.py runs one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

pytest.importorskip("ray.serve")

from ray.serve.schema import ServeDeploySchema

from inferd.ray import (
    DEFAULT_MAX_ONGOING_REQUESTS,
    RayAppArgs,
    add_inference_service,
    build,
)

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "ray" / "serve-config.yaml"


def test_serve_config_is_a_valid_ray_serve_deploy_config() -> None:
    config = ServeDeploySchema.model_validate(yaml.safe_load(CONFIG.read_text()))
    (app,) = config.applications
    assert app.import_path == "inferd.ray:build"
    assert config.grpc_options.grpc_servicer_functions == ["inferd.ray.add_inference_service"]
    args = RayAppArgs(**app.args)
    assert args.target_ongoing_requests <= args.max_ongoing_requests


def test_the_servicer_function_named_in_the_config_is_importable() -> None:
    import importlib

    module, _, name = "inferd.ray.add_inference_service".rpartition(".")
    assert getattr(importlib.import_module(module), name) is add_inference_service


def test_fixed_replicas_by_default_with_room_for_batches() -> None:
    options = RayAppArgs(model_repository="/models").deployment_options()
    assert options["num_replicas"] == 1
    assert options["max_ongoing_requests"] == DEFAULT_MAX_ONGOING_REQUESTS
    assert "autoscaling_config" not in options


def test_auto_replicas_autoscale_on_ongoing_requests() -> None:
    args = RayAppArgs(
        model_repository="/models", num_replicas="auto", max_replicas=6, target_ongoing_requests=64
    )
    options = args.deployment_options()
    assert options["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 6,
        "target_ongoing_requests": 64,
    }
    assert "num_replicas" not in options


def test_inconsistent_arguments_are_refused() -> None:
    with pytest.raises(ValidationError, match="must not exceed max_ongoing_requests"):
        RayAppArgs(model_repository="/m", target_ongoing_requests=300, max_ongoing_requests=10)
    with pytest.raises(ValidationError, match="model_repository"):
        RayAppArgs()  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="extra"):
        RayAppArgs(model_repository="/m", replicas=2)  # type: ignore[call-arg]


def test_build_makes_one_deployment_with_the_options(tmp_path: Path) -> None:
    app = build({"model_repository": str(tmp_path), "num_replicas": 3, "num_cpus": 2})
    deployment = app._bound_deployment
    assert deployment.name == "inferd"
    assert deployment.num_replicas == 3
    assert deployment.ray_actor_options["num_cpus"] == 2
