"""Starts as KServe, ModelMesh and Seldon Core run inferd: the pure parts.

The cgroup CPU quota from fake cgroup folders, the runtime told from a model's
files, the environment's model, ``-1`` message lengths, a repository folder that
does not exist yet.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferd.errors import ConfigurationError
from inferd.serving.repository import ModelRepository
from inferd.settings import ServerSettings
from inferd.settings.cpu_quota import available_cpus, cgroup_cpu_limit
from inferd.settings.loader import default_models_dir, model_settings_from_env
from inferd.settings.runtime_detect import choose_runtime, runtime_for_files
from inferd.settings.runtime_names import LIGHTGBM, MLFLOW, ONNX, SKLEARN, XGBOOST
from tests.support.models import write_model_folder

# ---- the cgroup CPU quota ----


def fake_cgroup(tmp_path: Path, files: dict[str, str], own: str = "0::/") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(own + "\n")
    return root, proc


CORES = len(os.sched_getaffinity(0))


def test_cgroup_v2_quota_in_the_containers_namespace(tmp_path: Path) -> None:
    root, proc = fake_cgroup(tmp_path, {"cpu.max": "150000 100000\n"})
    assert cgroup_cpu_limit(root, proc) == 1.5
    assert available_cpus(root, proc) == min(CORES, 2)  # 1.5 rounds up


def test_cgroup_v2_quota_of_the_process_own_cgroup(tmp_path: Path) -> None:
    files = {"cpu.max": "max 100000\n", "kubepods/pod1/cpu.max": "100000 100000\n"}
    root, proc = fake_cgroup(tmp_path, files, own="0::/kubepods/pod1")
    assert cgroup_cpu_limit(root, proc) == 1.0
    assert available_cpus(root, proc) == 1


def test_cgroup_v2_without_a_limit(tmp_path: Path) -> None:
    root, proc = fake_cgroup(tmp_path, {"cpu.max": "max 100000\n"})
    assert cgroup_cpu_limit(root, proc) is None
    assert available_cpus(root, proc) == CORES


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    files = {"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000"}
    root, proc = fake_cgroup(tmp_path, files, own="4:cpu,cpuacct:/\n0::/")
    assert cgroup_cpu_limit(root, proc) == 0.5
    assert available_cpus(root, proc) == 1  # never fewer than one


def test_cgroup_v1_without_a_limit(tmp_path: Path) -> None:
    files = {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}
    root, proc = fake_cgroup(tmp_path, files, own="2:cpu:/")
    assert cgroup_cpu_limit(root, proc) is None


def test_no_cgroup_at_all_means_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path / "none", tmp_path / "none") is None
    assert available_cpus(tmp_path / "none", tmp_path / "none") == CORES


def test_a_quota_above_the_affinity_is_capped_by_it(tmp_path: Path) -> None:
    root, proc = fake_cgroup(tmp_path, {"cpu.max": f"{(CORES + 8) * 100000} 100000"})
    assert available_cpus(root, proc) == CORES


def test_cpu_count_workers_read_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("inferd.settings.server.available_cpus", lambda: 3)
    assert ServerSettings(parallel_workers="cpu_count").parallel_workers == 3  # type: ignore[arg-type]


# ---- the runtime told from the files ----


@pytest.mark.parametrize(
    ("files", "runtime"),
    [
        (["model.joblib"], SKLEARN),
        (["model.pkl", "requirements.txt"], SKLEARN),
        (["model.onnx"], ONNX),
        (["model.ubj"], XGBOOST),
        (["model.json", "model-settings.json"], XGBOOST),
        (["model.txt"], LIGHTGBM),
        (["MLmodel", "model.pkl", "conda.yaml"], MLFLOW),
        (["model.onnx", "model.joblib"], None),  # two frameworks: the files do not tell
        ([], None),
    ],
)
def test_runtime_for_files(tmp_path: Path, files: list[str], runtime: str | None) -> None:
    for name in files:
        (tmp_path / name).write_text("x")
    assert runtime_for_files(tmp_path) == runtime


def test_runtime_for_files_through_symlinks(tmp_path: Path) -> None:
    """KServe's storage initializer and ModelMesh link the artifacts in."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "resnet.onnx").write_text("x")
    (tmp_path / "models").symlink_to(tmp_path / "store")
    assert runtime_for_files(tmp_path / "models") == ONNX
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "model.onnx").symlink_to(tmp_path / "store" / "resnet.onnx")
    assert runtime_for_files(tmp_path / "linked") == ONNX
    assert runtime_for_files(tmp_path / "linked" / "model.onnx") == ONNX


def test_choose_runtime_replaces_only_a_missing_or_fallback_class(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_text("x")
    assert choose_runtime("", tmp_path) == ONNX  # {{.Labels.modelClass}} with no label
    assert choose_runtime(None, tmp_path) == ONNX
    assert choose_runtime("mlserver_sklearn.SKLearnModel", tmp_path) == ONNX  # the fallback
    assert choose_runtime("mlserver_xgboost.XGBoostModel", tmp_path) == (
        "mlserver_xgboost.XGBoostModel"  # named explicitly: kept
    )
    sklearn = tmp_path / "sk"
    sklearn.mkdir()
    (sklearn / "model.joblib").write_text("x")
    assert choose_runtime("mlserver_sklearn.SKLearnModel", sklearn) == (
        "mlserver_sklearn.SKLearnModel"
    )
    assert choose_runtime("", None) is None


# ---- the environment's model ----


def test_a_name_alone_describes_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """ModelMesh's placeholder: the server starts and models come through the API."""
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "dummy-model-fixme")
    assert model_settings_from_env() is None


def test_an_empty_implementation_is_told_from_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "model.onnx").write_text("x")
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "resnet")
    monkeypatch.setenv("MLSERVER_MODEL_IMPLEMENTATION", "")
    monkeypatch.setenv("MLSERVER_MODEL_URI", str(tmp_path))
    settings = model_settings_from_env()
    assert settings is not None
    assert (settings.name, settings.implementation) == ("resnet", ONNX)


def test_files_that_do_not_tell_are_refused_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "mystery")
    monkeypatch.setenv("MLSERVER_MODEL_URI", str(tmp_path))
    with pytest.raises(ConfigurationError, match="no runtime could be told from the files"):
        model_settings_from_env()


def test_models_dir_is_the_default_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERD_MODELS_DIR", raising=False)
    monkeypatch.delenv("MLSERVER_MODELS_DIR", raising=False)
    assert default_models_dir() == Path(".")
    monkeypatch.setenv("MLSERVER_MODELS_DIR", "/mnt/models")
    assert default_models_dir() == Path("/mnt/models")
    monkeypatch.setenv("INFERD_MODELS_DIR", "/srv/models")
    assert default_models_dir() == Path("/srv/models")


# ---- settings ModelMesh gives ----


def test_grpc_max_message_length_minus_one_is_accepted_and_others_are_not() -> None:
    assert ServerSettings(grpc_max_message_length=-1).grpc_max_message_length == -1
    with pytest.raises(ValueError, match="or -1 for no limit"):
        ServerSettings(grpc_max_message_length=-2)


def test_a_missing_folder_is_an_empty_repository_when_allowed(tmp_path: Path) -> None:
    later = ModelRepository(tmp_path / "later", loaded_later=True)
    assert later.scan().models == []
    assert later.find("iris") == []
    with pytest.raises(ConfigurationError, match="it does not exist"):
        ModelRepository(tmp_path / "later").find_all()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match=r"is not a folder$"):
        ModelRepository(tmp_path / "file", loaded_later=True).scan()


def test_models_loaded_later_keep_their_own_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ModelMesh sets MLSERVER_MODEL_NAME=dummy-model-fixme and writes each model's own
    model-settings.json: those names must stand (at start they would be replaced)."""
    write_model_folder(tmp_path, "a", name="iris__isvc-1")
    write_model_folder(tmp_path, "b", name=None)  # {}
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "dummy-model-fixme")
    names = {model.name for model in ModelRepository(tmp_path, loaded_later=True).scan().models}
    assert names == {"iris__isvc-1", "b"}
    at_start = ModelRepository(tmp_path).scan().models
    assert {model.name for model in at_start} == {"dummy-model-fixme"}


@pytest.mark.parametrize("from_kserve", ["", "mlserver_sklearn.SKLearnModel"])
def test_a_shipped_model_settings_file_wins_over_kserve_guess(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, from_kserve: str
) -> None:
    write_model_folder(tmp_path, "", ONNX, name="m")  # the repository is the model's folder
    monkeypatch.setenv("MLSERVER_MODEL_IMPLEMENTATION", from_kserve)
    (found,) = ModelRepository(tmp_path).find_all()
    assert found.implementation == ONNX
    monkeypatch.setenv("MLSERVER_MODEL_IMPLEMENTATION", "mlserver_xgboost.XGBoostModel")
    (found,) = ModelRepository(tmp_path).find_all()
    assert found.implementation == "mlserver_xgboost.XGBoostModel"  # a named class still wins
