"""Building, loading and calling framework runtimes in-process, for the unit tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inferd.model import Model
from inferd.settings import ModelSettings
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

RuntimeT = TypeVar("RuntimeT", bound=Model)


def model_settings(
    folder: Path, implementation: str, parameters: dict[str, Any] | None = None, **settings: Any
) -> ModelSettings:
    """Settings as if read from ``folder/model-settings.json``."""
    data = {"name": "model", "implementation": implementation, **settings}
    data["parameters"] = parameters or {}
    return model_settings_from_dict(data, source=folder / "model-settings.json")


def load(runtime: type[RuntimeT], settings: ModelSettings) -> RuntimeT:
    model = runtime(settings)
    assert asyncio.run(model.load()) is True
    return model


def request(
    *inputs: Tensor, outputs: tuple[str, ...] = (), parameters: dict[str, Any] | None = None
) -> InferenceRequest:
    return InferenceRequest(
        inputs=list(inputs),
        id="req-1",
        outputs=[RequestedOutput(name) for name in outputs],
        parameters=parameters or {},
    )


def infer(model: Model, *inputs: Tensor, **options: Any) -> dict[str, np.ndarray]:
    """The model's outputs by name, for a request of ``inputs``."""
    response = model.predict(request(*inputs, **options))
    assert isinstance(response, InferenceResponse)  # the runtimes predict synchronously
    assert response.id == "req-1"
    assert response.model_name == model.name
    return {tensor.name: tensor.data for tensor in response.outputs}
