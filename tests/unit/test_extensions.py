"""The extensions server metadata lists: exactly those served with the settings."""

from __future__ import annotations

from inferd.serving.extensions import served_extensions
from inferd.settings import ServerSettings

ALWAYS = [
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
]

# Triton's names: the extension, then its optional part (an unload's unload_dependents).
REPOSITORY = ["model_repository", "model_repository(unload_dependents)"]


class Regions:
    """Shared memory regions on a server with or without a usable GPU."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu

    def serves_cuda(self) -> bool:
        return self.gpu


def test_the_defaults_list_the_repository_but_no_shared_memory() -> None:
    served = served_extensions(ServerSettings(), None)
    assert served == ["classification", "sequence", *REPOSITORY, *ALWAYS[2:]]
    assert "cuda_shared_memory" not in served


def test_shared_memory_on_and_the_repository_api_off() -> None:
    settings = ServerSettings(shared_memory_enabled=True, model_repository_api=False)
    served = served_extensions(settings, Regions(gpu=False))
    assert "model_repository" not in served
    assert "model_repository(unload_dependents)" not in served
    assert served == [*ALWAYS[:4], "system_shared_memory", *ALWAYS[4:]]


def test_cuda_shared_memory_only_where_a_gpu_can_be_used() -> None:
    on = ServerSettings(shared_memory_enabled=True)
    with_gpu = served_extensions(on, Regions(gpu=True))
    shared = ["system_shared_memory", "cuda_shared_memory"]
    assert with_gpu == [*ALWAYS[:2], *REPOSITORY, *ALWAYS[2:4], *shared, *ALWAYS[4:]]
    assert "cuda_shared_memory" not in served_extensions(on, Regions(gpu=False))


def test_the_settings_extensions_come_last_each_once() -> None:
    settings = ServerSettings(extensions=["my_ext", "statistics", "my_ext", "other"])
    served = served_extensions(settings, None)
    assert served[-2:] == ["my_ext", "other"]
    assert served.count("statistics") == 1 and served.count("my_ext") == 1
