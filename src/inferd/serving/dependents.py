"""Triton's ``unload_dependents`` (model repository extension): unloading an ensemble
with it unloads the models its steps call too.

Triton unloads "any dependent model that was loaded along with the requested
model", such as the models composing an ensemble. Here: the ensemble's step models,
through nested ensembles, except those a step of another ensemble still loaded
calls (unloading them would break it). Each is unloaded as a client's unload is
(server-wide, in every process); one already gone is no failure.
"""

from __future__ import annotations

from collections.abc import Iterable

from inferd.errors import ModelNotFound
from inferd.serving.registry import Registry
from inferd.serving.server_wide import ServerWide

# The repository unload parameter that asks for it.
UNLOAD_DEPENDENTS = "unload_dependents"


async def unload(server_wide: ServerWide, registry: Registry, name: str, dependents: bool) -> None:
    """Unload ``name``, and with ``dependents`` the models its ensemble steps call."""
    steps = _unloaded_with(registry, name) if dependents else []
    await server_wide.unload(name)
    for step in steps:
        try:
            await server_wide.unload(step)
        except ModelNotFound:  # unloaded meanwhile, or never loaded: as Triton, no error
            continue


def _unloaded_with(registry: Registry, name: str) -> list[str]:
    """The models composing ``name`` (nested ensembles' too), in step order, less those
    another ensemble that stays loaded calls."""
    composing: list[str] = []
    pending = [name]
    while pending:
        for step in _steps(registry, pending.pop(0)):
            if step != name and step not in composing:
                composing.append(step)
                pending.append(step)
    going = {name, *composing}
    kept = {
        step for other in registry.names() if other not in going for step in _steps(registry, other)
    }
    return [model for model in composing if model not in kept]


def _steps(registry: Registry, name: str) -> Iterable[str]:
    """The model names the steps of ensemble ``name`` call (none for another model)."""
    for version in registry.versions_of(name):
        config = version.settings.extra.get("triton_config")
        if not isinstance(config, dict) or config.get("platform") != "ensemble":
            continue
        for step in config.get("ensemble_scheduling", {}).get("step", []):
            model = step.get("model_name")
            if isinstance(model, str):
                yield model
