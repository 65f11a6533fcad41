"""XGBoost and LightGBM under default settings: 2 protocol processes forked from a
parent (``fork_protocol_processes``), the models copied into each.

Both libraries carry GNU OpenMP, whose thread pool hangs a child forked after it ran,
and both loads run parallel regions. The parent holds OpenMP to one thread while it
loads (no pool starts) and each process gets its threads back, so both models are
shared; every process must answer right, none may hang."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.models import write_model_folder
from tests.support.procstat import forked_protocol_processes, protocol_parent, served_by
from tests.support.serverproc import LEFT_OUT, start_server

FEATURES = 4
ROWS = 3
SETTINGS = {"parallel_workers": LEFT_OUT, "shutdown_grace_seconds": 5, "protocol_processes": 2}
PER_PROCESS = "The model '{}' is loaded in each of the 2 protocol processes"


def _data() -> tuple[np.ndarray, np.ndarray]:
    features = np.random.default_rng(0).random((200, FEATURES))
    return features, features[:, 0] * 2 + features[:, 1]


def _xgboost(root: Path) -> np.ndarray:
    """A regressor served by MLServer's runtime name; what it predicts for the query."""
    xgb = pytest.importorskip("xgboost")
    features, target = _data()
    folder = write_model_folder(root, "xgb", "mlserver_xgboost.XGBoostModel")
    model = xgb.XGBRegressor(n_estimators=5, max_depth=2).fit(features, target)
    model.save_model(folder / "model.json")
    return np.asarray(model.predict(_query()))


def _lightgbm(root: Path) -> np.ndarray:
    lgb = pytest.importorskip("lightgbm")
    features, target = _data()
    folder = write_model_folder(root, "lgbm", "mlserver_lightgbm.LightGBMModel")
    params = {"objective": "regression", "verbose": -1, "num_iterations": 5}
    booster = lgb.train(params, lgb.Dataset(features, target))
    booster.save_model(str(folder / "model.txt"))
    return np.asarray(booster.predict(_query()))


def _query() -> np.ndarray:
    return np.linspace(0.1, 0.9, ROWS * FEATURES).reshape(ROWS, FEATURES)


def test_xgboost_and_lightgbm_are_shared_and_answer_right_from_every_process(
    tmp_path: Path,
) -> None:
    expected = {"xgb": _xgboost(tmp_path), "lgbm": _lightgbm(tmp_path)}
    with start_server(tmp_path, SETTINGS) as server:
        log = server.log()
        for name in expected:  # loaded once, in the parent: not left out
            assert PER_PROCESS.format(name) not in log, log
            shared = rf"Protocol fork parent \(pid \d+\) loaded .*'{name}'"
            assert re.search(shared, log), log
        body = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [ROWS, FEATURES],
                            "data": _query().ravel().tolist()}]}  # fmt: skip
        for _ in range(8):  # fresh connections: both processes answer, none hangs
            for name, predicted in expected.items():
                url = f"{server.url}/v2/models/{name}/infer"
                response = httpx.post(url, json=body, timeout=10)
                assert response.status_code == 200, response.text
                answer = response.json()["outputs"][0]["data"]
                np.testing.assert_allclose(answer, predicted, rtol=1e-5)
        assert protocol_parent(server.process.pid) is not None
        forked = forked_protocol_processes(server.process.pid)
        assert len(forked) == 2 and served_by(server.process.pid) == forked  # still forked


def test_xgboost_and_lightgbm_workers_are_forked_by_default_and_answer_right(
    tmp_path: Path,
) -> None:
    # A lone server with 2 workers: each model's workers forked from a parent of its own
    # (fork_workers, the default from 2 workers), OpenMP held while that parent loads.
    expected = {"xgb": _xgboost(tmp_path), "lgbm": _lightgbm(tmp_path)}
    settings = {"parallel_workers": 2, "protocol_processes": 1, "shutdown_grace_seconds": 5}
    with start_server(tmp_path, settings) as server:
        log = server.log()
        for name in expected:
            assert f"Loaded model '{name}' in its fork parent" in log, log
        assert "not forked from one parent" not in log, log
        body = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [ROWS, FEATURES],
                            "data": _query().ravel().tolist()}]}  # fmt: skip
        for _ in range(4):
            for name, predicted in expected.items():
                url = f"{server.url}/v2/models/{name}/infer"
                response = httpx.post(url, json=body, timeout=10)
                assert response.status_code == 200, response.text
                np.testing.assert_allclose(
                    response.json()["outputs"][0]["data"], predicted, rtol=1e-5
                )
