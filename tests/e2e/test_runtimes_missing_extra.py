"""A runtime whose framework is not installed fails its own model's load with the
install line; the server and its other models keep serving."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.support.models import add_sklearn_model, write_model_folder
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

# Put first on the server's PYTHONPATH, it makes `import xgboost` fail as it does
# where the package is not installed.
HIDE_XGBOOST = "raise ModuleNotFoundError(\"No module named 'xgboost'\", name='xgboost')\n"
HINT = "pip install 'inferd[xgboost]'"


@pytest.fixture(scope="module")
def server_without_xgboost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("missing-extra")
    (root / "hidden").mkdir()
    (root / "hidden" / "xgboost.py").write_text(HIDE_XGBOOST)
    repository = root / "repository"
    add_sklearn_model(repository, "iris")
    write_model_folder(
        repository, "churn", "mlserver_xgboost.XGBoostModel", files={"model.json": "{}"}
    )
    # Not ready as a whole (one model failed): wait for liveness, then for the loads.
    # In front of the test's own path, so that the server runs the code under test.
    path = os.pathsep.join([str(root / "hidden"), os.environ.get("PYTHONPATH", "")])
    with start_server(repository, env={"PYTHONPATH": path}, wait="/v2/health/live") as process:
        yield process


def index(client: httpx.Client) -> dict[str, dict[str, str]]:
    entries = client.post("/v2/repository/index", json={}).json()
    return {entry["name"]: entry for entry in entries}


def test_the_model_fails_with_the_install_line_and_the_rest_serve(
    server_without_xgboost: ServerProcess, iris_features: np.ndarray
) -> None:
    with httpx.Client(base_url=server_without_xgboost.url, timeout=30) as client:
        entries = wait_for(
            lambda: (
                (found := index(client)).get("churn", {}).get("state") == "UNAVAILABLE" and found
            ),
            "the churn model's load to fail",
        )
        reason = entries["churn"]["reason"]
        assert "XGBoostModel needs xgboost, which cannot be imported" in reason
        assert HINT in reason

        infer = client.post(
            "/v2/models/churn/infer",
            json={"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [0]}]},
        )
        assert infer.status_code == 503
        assert HINT in infer.json()["error"]

        assert wait_for(lambda: client.get("/v2/models/iris/ready").status_code == 200, "iris")
        rows = iris_features[:2].reshape(-1).tolist()
        served = client.post(
            "/v2/models/iris/infer",
            json={"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP64", "data": rows}]},
        )
        assert served.status_code == 200, served.text
    assert server_without_xgboost.process.poll() is None
    assert HINT in server_without_xgboost.log()
