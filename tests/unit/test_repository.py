"""The model repository: which model-settings.json files make which models."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import ConfigurationError, ModelNotFound
from inferd.serving.repository import ModelRepository
from tests.support.models import MODEL_SETTINGS, write_model_folder


def add_model(root: Path, folder: str, **settings: Any) -> Path:
    """``root/folder/model-settings.json`` (``root``'s own for ""), named only if given."""
    fields = {"name": None, "implementation": "runtime.Model", **settings}
    return write_model_folder(root, folder, **fields) / MODEL_SETTINGS


def names_and_versions(repository: ModelRepository) -> list[tuple[str, str | None]]:
    return [(settings.name, settings.version) for settings in repository.find_all()]


def test_every_folder_with_a_settings_file_is_a_model(tmp_path: Path) -> None:
    add_model(tmp_path, "b-model")
    add_model(tmp_path, "a-model", name="renamed")
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "notes.txt").write_text("no settings here")
    assert names_and_versions(ModelRepository(tmp_path)) == [("renamed", None), ("b-model", None)]


def test_nested_folders_are_searched(tmp_path: Path) -> None:
    add_model(tmp_path, "team/project/classifier")
    (found,) = ModelRepository(tmp_path).find_all()
    assert found.name == "classifier"  # the folder holding the file, as in MLServer
    assert found.uri == tmp_path / "team" / "project" / "classifier"


def test_a_model_settings_file_in_the_root_itself(tmp_path: Path) -> None:
    # MLServer's examples keep model-settings.json beside settings.json.
    add_model(tmp_path, "", name="mnist-svm", parameters={"uri": "./model.joblib"})
    (found,) = ModelRepository(tmp_path).find_all()
    assert (found.name, found.uri) == ("mnist-svm", tmp_path / "model.joblib")


def test_hidden_folders_are_skipped(tmp_path: Path) -> None:
    add_model(tmp_path, ".git/objects")
    add_model(tmp_path, "visible")
    assert names_and_versions(ModelRepository(tmp_path)) == [("visible", None)]


def test_versions_of_one_model_live_in_several_folders(tmp_path: Path) -> None:
    add_model(tmp_path, "double/v1", name="double", parameters={"version": "1"})
    add_model(tmp_path, "double/v2", name="double", parameters={"version": "2"})
    add_model(tmp_path, "other")
    repository = ModelRepository(tmp_path)
    assert names_and_versions(repository) == [("double", "1"), ("double", "2"), ("other", None)]
    assert [settings.version for settings in repository.find("double")] == ["1", "2"]
    assert repository.find("missing") == []


@pytest.mark.parametrize("version", [None, "1"])
def test_the_same_name_and_version_twice_is_refused(tmp_path: Path, version: str | None) -> None:
    parameters = {"version": version} if version else {}
    first = add_model(tmp_path, "a", name="same", parameters=parameters)
    second = add_model(tmp_path, "b", name="same", parameters=parameters)
    with pytest.raises(ConfigurationError) as raised:
        ModelRepository(tmp_path).find_all()
    message = str(raised.value)
    assert "Model 'same'" in message and "is defined twice" in message
    assert str(first) in message and str(second) in message
    assert "parameters.version" in message


def test_a_clash_caused_by_a_model_variable_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_model(tmp_path, "a")
    add_model(tmp_path, "b")
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "one-name")
    with pytest.raises(ConfigurationError, match="MLSERVER_MODEL_NAME set in the environment"):
        ModelRepository(tmp_path).find_all()


def test_with_no_settings_files_the_model_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "iris")
    monkeypatch.setenv("MLSERVER_MODEL_IMPLEMENTATION", "mlserver_sklearn.SKLearnModel")
    monkeypatch.setenv("MLSERVER_MODEL_URI", "/mnt/models")
    (found,) = ModelRepository(tmp_path).find_all()
    assert (found.name, found.uri, found.source) == ("iris", Path("/mnt/models"), None)


def test_settings_files_take_the_place_of_the_environment_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_model(tmp_path, "from-file")
    monkeypatch.setenv("MLSERVER_MODEL_IMPLEMENTATION", "other.Runtime")
    (found,) = ModelRepository(tmp_path).find_all()
    # One model (the file's), with the variable applied to it.
    assert (found.name, found.implementation) == ("from-file", "other.Runtime")


def test_an_empty_repository_has_no_models(tmp_path: Path) -> None:
    assert ModelRepository(tmp_path).find_all() == []


def test_a_missing_repository_is_named(tmp_path: Path) -> None:
    expected = f"Model repository {tmp_path / 'gone'} is not a folder"
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        ModelRepository(tmp_path / "gone").find_all()


def test_a_broken_file_stops_find_all_and_is_named(tmp_path: Path) -> None:
    add_model(tmp_path, "good")
    broken = add_model(tmp_path, "bad", max_batch_size="many")
    with pytest.raises(ConfigurationError) as raised:
        ModelRepository(tmp_path).find_all()
    assert str(broken) in str(raised.value)
    assert "max_batch_size" in str(raised.value)


def test_a_broken_file_only_blocks_its_own_model(tmp_path: Path) -> None:
    add_model(tmp_path, "good")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model-settings.json").write_text("{not json")
    repository = ModelRepository(tmp_path)
    scan = repository.scan()
    assert [settings.name for settings in scan.models] == ["good"]
    assert [broken.folder for broken in scan.broken] == ["bad"]
    assert "cannot be read as JSON" in scan.broken[0].error
    assert [settings.name for settings in repository.find("good")] == ["good"]
    with pytest.raises(ConfigurationError, match=re.escape("bad/model-settings.json")):
        repository.find("bad")


def test_a_broken_file_is_attributed_to_the_name_it_sets(tmp_path: Path) -> None:
    add_model(tmp_path, "double/v1", name="double", parameters={"version": "1"})
    add_model(tmp_path, "double/v2", name="double", parameters={"version": 2.5, "bogus": 1})
    add_model(tmp_path, "other")
    repository = ModelRepository(tmp_path)
    assert [broken.folder for broken in repository.scan().broken] == ["double"]
    with pytest.raises(ConfigurationError, match=re.escape("parameters.bogus: unknown setting")):
        repository.find("double")
    assert [settings.name for settings in repository.find("other")] == ["other"]


def test_an_unknown_name_is_not_found_and_mentions_files_whose_name_is_unreadable(
    tmp_path: Path,
) -> None:
    # The broken file's name cannot be read, so it may be the model asked for.
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "model-settings.json").write_text('{"name": ')
    with pytest.raises(ModelNotFound) as raised:
        ModelRepository(tmp_path).find("what-it-meant")
    assert raised.value.message.startswith(
        "Request for unknown model: 'what-it-meant' is not found; these settings"
    )
    assert "folder/model-settings.json" in raised.value.message


def test_broken_files_that_name_other_models_do_not_answer_for_an_unknown_name(
    tmp_path: Path,
) -> None:
    add_model(tmp_path, "named", name="other", max_batch_size="many")
    add_model(tmp_path, "unnamed", max_batch_size="many")  # named after its folder
    repository = ModelRepository(tmp_path)
    assert [broken.folder for broken in repository.scan().broken] == ["other", "unnamed"]
    assert repository.find("does-not-exist") == []


# ---- models are read only under the root -------------------------------------------


@pytest.mark.parametrize("uri", ["../../outside/model.joblib", "/etc/model.joblib", "../.."])
def test_a_uri_outside_the_root_is_refused(tmp_path: Path, uri: str) -> None:
    root = tmp_path / "repository"
    add_model(root, "escapes", parameters={"uri": uri})
    add_model(root, "stays", parameters={"uri": "./sub/../model.joblib"})
    repository = ModelRepository(root)
    with pytest.raises(ConfigurationError, match="outside the model repository"):
        repository.find_all()
    with pytest.raises(ConfigurationError, match=f"parameters.uri {re.escape(repr(uri))}"):
        repository.find("escapes")
    (stays,) = repository.find("stays")
    assert stays.uri == root / "stays" / "sub" / ".." / "model.joblib"


def test_links_inside_the_root_may_point_anywhere(tmp_path: Path) -> None:
    """ModelMesh's layout: the model folder in the root, its artifacts links to elsewhere;
    and a root reached through a link itself, named either way."""
    outside = tmp_path / "pulled"
    outside.mkdir()
    (outside / "model.joblib").write_text("weights")
    real_root = tmp_path / "real-root"
    add_model(real_root, "linked", parameters={"uri": str(real_root / "linked" / "model.joblib")})
    (real_root / "linked" / "model.joblib").symlink_to(outside / "model.joblib")
    (real_root / "linked" / "data").symlink_to(outside)
    add_model(real_root, "folder-link", parameters={"uri": "../linked/data"})
    link_to_root = tmp_path / "models"
    link_to_root.symlink_to(real_root)
    add_model(real_root, "via-link", parameters={"uri": str(link_to_root / "via-link")})
    found = ModelRepository(link_to_root).find_all()
    assert sorted(settings.name for settings in found) == ["folder-link", "linked", "via-link"]


def test_a_uri_from_the_environment_is_the_operators(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSERVER_MODEL_URI", "/mnt/models/iris.joblib")
    add_model(tmp_path, "iris")
    (found,) = ModelRepository(tmp_path).find_all()
    assert found.uri == Path("/mnt/models/iris.joblib")


def test_holds_names_the_models_on_disk_loaded_or_not(tmp_path: Path) -> None:
    add_model(tmp_path, "plain", name="plain")
    add_model(tmp_path, "double/v1", name="double", parameters={"version": "1"})
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model-settings.json").write_text("{not json")
    repository = ModelRepository(tmp_path)
    assert repository.holds("plain") and repository.holds("double")
    assert repository.holds("double", "1") and not repository.holds("double", "2")
    assert repository.holds("bad")  # its folder is there, its settings broken
    assert not repository.holds("nope") and not repository.holds("plain", "1")
    assert not ModelRepository(tmp_path / "gone").holds("plain")
