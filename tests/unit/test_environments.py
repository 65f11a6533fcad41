"""Model environments: which one a model names, unpacking tarballs safely and once."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from inferd.errors import ConfigurationError
from inferd.settings import ModelParameters, ModelSettings
from inferd.workers.environments import (
    WorkerEnvironment,
    environment_of,
    refuse_in_process_environment,
)


def model(**parameters: str) -> ModelSettings:
    return ModelSettings(name="m", parameters=ModelParameters(**parameters))


def fake_environment(folder: Path) -> Path:
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    return folder


def tarball(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return path


def test_no_environment_is_the_servers_own() -> None:
    assert environment_of(ModelSettings(name="m"), None) is None
    assert environment_of(model(uri="."), None) is None


def test_environment_path_expands_and_must_hold_a_python(tmp_path: Path) -> None:
    env = fake_environment(tmp_path / "env")
    os.environ["INFERD_TEST_ENV_DIR"] = str(tmp_path)
    try:
        assert environment_of(model(environment_path="$INFERD_TEST_ENV_DIR/env"), None) == env
    finally:
        del os.environ["INFERD_TEST_ENV_DIR"]
    with pytest.raises(ConfigurationError, match="has no bin/python to run"):
        environment_of(model(environment_path=str(tmp_path)), None)


def test_a_tarball_is_unpacked_once_under_its_hash(tmp_path: Path) -> None:
    # venv-pack keeps bin/python as a link to an absolute path: allowed.
    packed = tarball(
        tmp_path / "env.tar.gz",
        {"bin/python3": b"#!/bin/sh\n", "lib/x.py": b""},
        {"bin/python": "/usr/bin/python3"},
    )
    settings = model(environment_tarball=str(packed))
    environments = tmp_path / "envs"
    first = environment_of(settings, str(environments))
    assert first is not None and first.parent == environments and len(first.name) == 64
    assert (first / "lib" / "x.py").is_file()
    (first / "marker").write_text("")  # not unpacked again: the folder is reused
    assert environment_of(settings, str(environments)) == first
    assert (first / "marker").exists()
    assert [p.name for p in environments.iterdir()] == [first.name]


@pytest.mark.parametrize(
    ("members", "links"),
    [
        ({"../escaped": b"x", "bin/python": b""}, {}),
        ({"out/evil": b"x", "bin/python": b""}, {"out": "../.."}),
    ],
    ids=["dot-dot", "through-a-link"],
)
def test_a_tarball_cannot_write_outside_its_folder(
    tmp_path: Path, members: dict[str, bytes], links: dict[str, str]
) -> None:
    packed = tmp_path / "evil.tar.gz"
    with tarfile.open(packed, "w:gz") as archive:  # links first, then the members
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    environments = tmp_path / "deep" / "envs"
    with pytest.raises(ConfigurationError, match=r"cannot unpack parameters\.environment_tarball"):
        environment_of(model(environment_tarball=str(packed)), str(environments))
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "deep" / "escaped").exists()
    assert not (tmp_path / "evil").exists()
    assert list(environments.iterdir()) == []  # the staging folder went too


def test_an_absolute_member_lands_inside_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    packed = tarball(tmp_path / "abs.tar.gz", {str(outside): b"x", "bin/python": b""})
    unpacked = environment_of(model(environment_tarball=str(packed)), str(tmp_path / "envs"))
    assert unpacked is not None and not outside.exists()
    assert (unpacked / str(outside).lstrip("/")).read_bytes() == b"x"


def test_a_missing_tarball_and_both_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot read parameters\.environment_tarball"):
        environment_of(model(environment_tarball=str(tmp_path / "none.tar.gz")), None)
    with pytest.raises(ConfigurationError, match="set one of them"):
        environment_of(model(environment_path="/a", environment_tarball="b.tar.gz"), None)


def test_parallel_workers_0_refuses_an_environment() -> None:
    refuse_in_process_environment(model(uri="."))
    with pytest.raises(ConfigurationError, match=r"sets parameters\.environment_tarball"):
        refuse_in_process_environment(model(environment_tarball="e.tar.gz"))


def test_workers_in_an_environment_see_inferd_alone_on_their_path(tmp_path: Path) -> None:
    env = WorkerEnvironment(tmp_path / "env", tmp_path / "path")
    variables = env.process_environment()
    assert env.python == str(tmp_path / "env" / "bin" / "python")
    assert variables["PYTHONPATH"] == str(tmp_path / "path")
    assert variables["PATH"].startswith(str(tmp_path / "env" / "bin") + os.pathsep)
