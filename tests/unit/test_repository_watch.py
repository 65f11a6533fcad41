"""Change detection for repository polling: fingerprints, stability, which names act."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from inferd.errors import ConfigurationError
from inferd.serving.repository_watch import (
    Changes,
    ChangeTracker,
    fingerprint_repository,
    names_to_act_on,
)
from inferd.settings.loader import load_server_settings
from tests.support.models import write_model_folder


def model_folder(root: Path, folder: str, artifact: bytes = b"weights") -> Path:
    return write_model_folder(root, folder, "x.Y", name=None, files={"model.bin": artifact})


def bump_mtime(path: Path) -> None:
    """A rewrite with the same size, in the same nanosecond tick on coarse clocks."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


# ---- fingerprints ----


def test_each_model_folder_has_a_fingerprint_of_its_files(tmp_path: Path) -> None:
    model_folder(tmp_path, "iris")
    model_folder(tmp_path, "double/v1")
    (tmp_path / "settings.json").write_text("{}")  # the server's, in no model folder
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a model")

    snapshot = fingerprint_repository(tmp_path)

    assert snapshot is not None
    assert set(snapshot) == {"iris", os.path.join("double", "v1")}
    assert [entry[0] for entry in snapshot["iris"]] == ["model-settings.json", "model.bin"]


def test_a_file_below_a_model_folder_belongs_to_it_unless_a_nested_model_owns_it(
    tmp_path: Path,
) -> None:
    outer = model_folder(tmp_path, "outer")
    (outer / "weights").mkdir()
    (outer / "weights" / "part-1.bin").write_bytes(b"1")
    model_folder(tmp_path, "outer/inner")

    snapshot = fingerprint_repository(tmp_path)

    assert snapshot is not None
    outer_files = {entry[0] for entry in snapshot["outer"]}
    assert os.path.join("weights", "part-1.bin") in outer_files
    assert not any(name.startswith("inner") for name in outer_files)
    assert {entry[0] for entry in snapshot[os.path.join("outer", "inner")]} == {
        "model-settings.json",
        "model.bin",
    }


def test_a_model_at_the_root_is_the_folder_dot(tmp_path: Path) -> None:
    model_folder(tmp_path, ".")
    snapshot = fingerprint_repository(tmp_path)
    assert snapshot is not None and set(snapshot) == {"."}


def test_the_fingerprint_changes_with_size_mtime_and_replacement(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "iris")
    artifact = folder / "model.bin"
    first = fingerprint_repository(tmp_path)

    bump_mtime(artifact)
    touched = fingerprint_repository(tmp_path)
    artifact.write_bytes(b"weights, longer")
    grown = fingerprint_repository(tmp_path)
    replacement = folder / "new.bin"
    replacement.write_bytes(b"weights, longer")
    os.utime(replacement, ns=(artifact.stat().st_atime_ns, artifact.stat().st_mtime_ns))
    os.replace(replacement, artifact)  # same size and mtime: only the inode differs
    renamed = fingerprint_repository(tmp_path)

    assert len({str(first), str(touched), str(grown), str(renamed)}) == 4


def test_hidden_files_and_folders_are_not_looked_at(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "iris")
    before = fingerprint_repository(tmp_path)
    (folder / ".model.bin.swp").write_text("an editor's")
    (tmp_path / ".incoming").mkdir()
    model_folder(tmp_path, ".incoming/iris")  # being written, renamed into place later

    assert fingerprint_repository(tmp_path) == before


def test_a_switched_folder_symlink_changes_the_fingerprint(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "repository", "iris")
    for release in ("one", "two"):
        (tmp_path / release).mkdir()
        (tmp_path / release / "model.bin").write_bytes(release.encode())
    (folder / "weights").symlink_to(tmp_path / "one", target_is_directory=True)
    before = fingerprint_repository(tmp_path / "repository")

    (folder / "weights").unlink()
    (folder / "weights").symlink_to(tmp_path / "two", target_is_directory=True)

    assert fingerprint_repository(tmp_path / "repository") != before


def test_no_fingerprint_when_the_root_is_not_a_folder(tmp_path: Path) -> None:
    assert fingerprint_repository(tmp_path / "absent") is None


# ---- stability across two polls ----


def test_a_change_is_acted_on_once_it_is_the_same_in_two_polls(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "iris")
    tracker = ChangeTracker(fingerprint_repository(tmp_path) or {})

    (folder / "model.bin").write_bytes(b"being written")
    first = tracker.observe(fingerprint_repository(tmp_path) or {})
    (folder / "model.bin").write_bytes(b"being written, still")
    second = tracker.observe(fingerprint_repository(tmp_path) or {})
    third = tracker.observe(fingerprint_repository(tmp_path) or {})

    assert first.moving == {"iris"} and not first.settled
    assert second.moving == {"iris"} and not second.settled
    assert set(third.settled) == {"iris"} and not third.moving
    assert third.added == {"iris"} and not third.removed


def test_nothing_is_reported_until_settled_changes_change_again(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "iris")
    tracker = ChangeTracker(fingerprint_repository(tmp_path) or {})
    bump_mtime(folder / "model.bin")
    tracker.observe(fingerprint_repository(tmp_path) or {})
    settled = tracker.observe(fingerprint_repository(tmp_path) or {})

    tracker.settle(settled.settled)

    assert tracker.observe(fingerprint_repository(tmp_path) or {}) == Changes()


def test_a_settled_change_not_yet_acted_on_is_reported_again(tmp_path: Path) -> None:
    """A name busy loading leaves its folders unsettled: the next poll offers them again."""
    folder = model_folder(tmp_path, "iris")
    tracker = ChangeTracker(fingerprint_repository(tmp_path) or {})
    bump_mtime(folder / "model.bin")
    tracker.observe(fingerprint_repository(tmp_path) or {})
    tracker.observe(fingerprint_repository(tmp_path) or {})

    assert set(tracker.observe(fingerprint_repository(tmp_path) or {}).settled) == {"iris"}


def test_added_and_removed_folders(tmp_path: Path) -> None:
    model_folder(tmp_path, "old")
    tracker = ChangeTracker(fingerprint_repository(tmp_path) or {})
    model_folder(tmp_path, "new")
    (tmp_path / "old" / "model.bin").unlink()
    (tmp_path / "old" / "model-settings.json").unlink()
    (tmp_path / "old").rmdir()

    tracker.observe(fingerprint_repository(tmp_path) or {})
    changes = tracker.observe(fingerprint_repository(tmp_path) or {})

    assert changes.added == {"new"} and changes.removed == {"old"}
    tracker.settle(changes.settled)
    assert set(tracker.applied) == {"new"}


# ---- which model names act ----


def test_each_settled_folder_acts_for_its_name() -> None:
    changes = Changes(settled={"iris": (), "double/v1": (), "gone": None})
    served = {"iris": "iris", "double/v1": "double", "double/v2": "double", "gone": "gone"}
    now = {"iris": "iris", "double/v1": "double", "double/v2": "double"}

    plan = names_to_act_on(changes, served, now)

    assert plan == {"iris": {"iris"}, "double": {"double/v1"}, "gone": {"gone"}}


def test_a_renamed_folder_acts_for_its_old_and_new_name() -> None:
    changes = Changes(settled={"m": ()})
    assert names_to_act_on(changes, {"m": "before"}, {"m": "after"}) == {
        "before": {"m"},
        "after": {"m"},
    }


def test_a_name_waits_while_one_of_its_folders_is_still_moving() -> None:
    changes = Changes(settled={"double/v1": (), "iris": ()}, moving={"double/v2"})
    names = {"double/v1": "double", "double/v2": "double", "iris": "iris"}
    assert names_to_act_on(changes, names, names) == {"iris": {"iris"}}


def test_a_busy_name_waits_and_so_do_names_sharing_a_folder_with_it() -> None:
    changes = Changes(settled={"m": (), "other": ()})
    served = {"m": "before", "other": "after"}
    now = {"m": "after", "other": "after"}
    assert names_to_act_on(changes, served, now, busy={"before"}) == {}
    assert names_to_act_on(changes, served, now, busy={"unrelated"}) == {
        "before": {"m"},
        "after": {"m", "other"},
    }


def test_a_folder_that_came_and_went_between_polls_has_no_name() -> None:
    assert names_to_act_on(Changes(settled={"flash": None}), {}, {}) == {"": {"flash"}}


# ---- the setting ----


def test_polling_is_off_by_default_and_set_by_file_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_server_settings(tmp_path).repository_poll_secs == 0
    (tmp_path / "settings.json").write_text(json.dumps({"repository_poll_secs": 2}))
    assert load_server_settings(tmp_path).repository_poll_secs == 2
    monkeypatch.setenv("MLSERVER_REPOSITORY_POLL_SECS", "0.5")
    assert load_server_settings(tmp_path).repository_poll_secs == 0.5
    monkeypatch.setenv("INFERD_REPOSITORY_POLL_SECS", "0.25")
    assert load_server_settings(tmp_path).repository_poll_secs == 0.25


def test_a_negative_poll_interval_is_refused_naming_the_setting(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({"repository_poll_secs": -1}))
    with pytest.raises(ConfigurationError, match="repository_poll_secs"):
        load_server_settings(tmp_path)
