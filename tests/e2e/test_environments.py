"""Per-model Python environments on a real server: two models see two versions of one
package, each from its own environment (one an existing venv, one a tarball), and a
model with an environment is refused under parallel_workers: 0.

The environments are venvs made here without pip (no network). Each holds its own
version of a tiny package, ``inferd_probe``, in its site-packages; a ``.pth`` file
there appends this test venv's site-packages after it, so the worker finds numpy
and pydantic (what inferd's worker side needs) without installing them again,
while the environment's own ``inferd_probe`` comes first and the server's
environment has none.
"""

from __future__ import annotations

import site
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.support.models import write_model_folder
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, write_settings

from .test_settings_e2e import assert_refused, run_inferd

PROBE_RUNTIME = textwrap.dedent(
    """
    import sys

    import numpy as np

    from inferd import InferenceRequest, InferenceResponse, Model, Tensor


    class Probe(Model):
        def predict(self, request: InferenceRequest) -> InferenceResponse:
            try:
                import inferd_probe
            except ImportError:
                version = "none"
            else:
                version = inferd_probe.__version__
            seen = [version.encode(), sys.prefix.encode()]
            return InferenceResponse(outputs=[Tensor("seen", np.array(seen, dtype=object))])
    """
)


def make_environment(folder: Path, probe_version: str) -> Path:
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120
    )
    [packages] = folder.glob("lib/python3*/site-packages")
    (packages / "inferd_probe").mkdir()
    (packages / "inferd_probe" / "__init__.py").write_text(f"__version__ = {probe_version!r}\n")
    server_packages = "\n".join(site.getsitepackages())
    (packages / "server-packages.pth").write_text(server_packages + "\n")
    return folder


def pack(environment: Path, tarball: Path) -> Path:
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(environment, arcname=".")
    return tarball


def add_probe_model(repository: Path, name: str, **parameters: Any) -> None:
    files = {"probe.py": PROBE_RUNTIME}
    write_model_folder(repository, name, "probe.Probe", files=files, parameters=parameters)


def seen(server: ServerProcess, name: str) -> list[str]:
    body = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [1]}]}
    response = httpx.post(f"{server.url}/v2/models/{name}/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return list(response.json()["outputs"][0]["data"])


def test_each_model_runs_in_its_own_environment(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    old = make_environment(tmp_path / "env-old", "1.0")
    new = make_environment(tmp_path / "env-new", "2.0")
    repository = tmp_path / "models"
    add_probe_model(repository, "old", environment_path=str(old))
    add_probe_model(repository, "new", environment_tarball="../new.tar.gz")
    pack(new, repository / "new.tar.gz")
    add_probe_model(repository, "plain")
    environments = tmp_path / "unpacked"
    # The environments' own shared workers (fork_workers would fork each model from a
    # parent in its environment: test_fork_workers.py).
    settings = {"parallel_workers": 2, "environments_dir": str(environments), "fork_workers": False}
    server = start(repository, settings=settings)

    assert seen(server, "old") == ["1.0", str(old)]
    [unpacked] = environments.iterdir()
    assert seen(server, "new") == ["2.0", str(unpacked)]
    assert seen(server, "plain")[0] == "none"
    log = server.log()
    # No warnings about them (with protocol processes an INFO line names the setting
    # that sends the model to the model host).
    warned = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
    assert not [line for line in warned if "environment_path" in line or "environments_dir" in line]
    assert log.count("Starting worker processes in environment") == 2

    # A reload reuses the unpacked tarball; the last model of an environment going
    # stops its workers.
    reload = httpx.post(f"{server.url}/v2/repository/models/new/load", timeout=60)
    assert reload.status_code == 200, reload.text
    assert list(environments.iterdir()) == [unpacked]
    assert seen(server, "new")[0] == "2.0"
    unload = httpx.post(f"{server.url}/v2/repository/models/old/unload", timeout=60)
    assert unload.status_code == 200, unload.text
    assert f"Stopping the worker processes of environment {old}" in server.log()
    assert seen(server, "new")[0] == "2.0"


def test_an_environment_without_inferds_needs_fails_its_model_clearly(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    repository = tmp_path / "models"
    add_probe_model(repository, "bare", environment_path=str(bare))
    add_probe_model(repository, "plain")
    server = start(repository, settings={"parallel_workers": 1}, wait="/v2/health/live")

    def reasons() -> dict[str, str]:
        answer = httpx.post(f"{server.url}/v2/repository/index", timeout=10)
        if answer.status_code == 503:  # protocol processes forked once loaded: not yet
            return {}
        found = {entry["name"]: entry.get("reason", "") for entry in answer.json()}
        return found if found.get("bare") else {}

    failed = wait_for(reasons, "the bare environment's model to fail")
    assert "the worker processes of its environment" in failed["bare"]
    assert "numpy, ml-dtypes, pydantic>=2.5 and pydantic-settings" in failed["bare"]
    assert seen(server, "plain")[0] == "none"


def test_parallel_workers_0_refuses_a_model_with_an_environment(tmp_path: Path) -> None:
    write_settings(tmp_path, {"parallel_workers": 0})
    add_probe_model(tmp_path, "old", environment_path="/opt/env")
    assert_refused(
        run_inferd(tmp_path),
        "model 'old' sets parameters.environment_path, which needs worker processes",
        "parallel_workers: 0",
        str(tmp_path / "old" / "model-settings.json"),
    )


def test_parallel_workers_0_refuses_loading_a_model_with_an_environment(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    add_probe_model(tmp_path, "plain")
    server = start(tmp_path, settings={"parallel_workers": 0})
    add_probe_model(tmp_path, "packed", environment_tarball="env.tar.gz")
    response = httpx.post(f"{server.url}/v2/repository/models/packed/load", timeout=30)
    assert response.status_code == 400, response.text
    assert (
        "sets parameters.environment_tarball, which needs worker processes"
        in (response.json()["error"])
    )
    assert seen(server, "plain")[0] == "none"
