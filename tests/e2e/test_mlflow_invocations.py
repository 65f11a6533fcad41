"""MLflow's scoring-server routes on an MLflow model, as MLServer serves them:
/invocations (JSON and CSV), /ping, /version; in process and in a worker."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.serverproc import ServerProcess

from .runtime_models import IRIS_X, FrameworkModels


@pytest.mark.parametrize("workers", [0, 1])
def test_invocations_ping_and_version(
    framework_models: FrameworkModels,
    start: Callable[..., ServerProcess],
    tmp_path: Path,
    workers: int,
) -> None:
    repository = tmp_path / f"mlflow-{workers}"
    shutil.copytree(framework_models.repository / "mlflow-iris", repository / "mlflow-iris")
    server = start(repository, settings={"parallel_workers": workers})
    estimator: Any = framework_models.trained["mlflow-iris"]
    rows = IRIS_X[:3]
    columns = list(estimator.feature_names_in_)
    expected = estimator.predict(rows).tolist()
    with httpx.Client(base_url=server.url, timeout=30) as rest:
        split = {"dataframe_split": {"columns": columns, "data": rows.tolist()}}
        answer = rest.post("/invocations", json=split)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"predictions": expected}
        csv = ",".join(columns) + "\n" + "\n".join(",".join(map(str, row)) for row in rows)
        answer = rest.post("/invocations", content=csv, headers={"content-type": "text/csv"})
        assert answer.json() == {"predictions": expected}
        wrong = rest.post("/invocations", content="x", headers={"content-type": "text/plain"})
        assert wrong.status_code == 400 and "content types" in wrong.json()["error"]
        assert rest.get("/ping").status_code == 200
        assert isinstance(rest.get("/version").json(), str)


def test_invocations_do_not_go_through_the_response_cache(
    framework_models: FrameworkModels, start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    folder = shutil.copytree(
        framework_models.repository / "mlflow-iris", tmp_path / "cached" / "mlflow-iris"
    )
    settings_file = folder / "model-settings.json"
    settings = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps({**settings, "cache_enabled": True}))
    server = start(folder.parent, settings={"cache_enabled": True})
    estimator: Any = framework_models.trained["mlflow-iris"]
    split = {"dataframe_split": {"columns": list(estimator.feature_names_in_), "data": [[1] * 4]}}
    with httpx.Client(base_url=server.url, timeout=30) as rest:
        for _ in range(2):
            assert rest.post("/invocations", json=split).status_code == 200
            assert rest.get("/ping").status_code == 200
        stats = rest.get("/v2/models/mlflow-iris/stats").json()["model_stats"][0]
    counts = stats["inference_stats"]
    assert (counts["cache_hit"]["count"], counts["cache_miss"]["count"]) == (0, 0)
    assert counts["success"]["count"] == 4  # each call ran
