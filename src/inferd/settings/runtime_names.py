"""The runtimes' names: inferd's runtime classes, and MLServer's names for them.

One table, read where a model's ``implementation`` is resolved
(workers/runtime_loader.py) and where the runtime is told from a model's files
(settings/runtime_detect.py).
"""

from __future__ import annotations

SKLEARN = "inferd.runtimes.sklearn.SKLearnModel"
XGBOOST = "inferd.runtimes.xgboost.XGBoostModel"
LIGHTGBM = "inferd.runtimes.lightgbm.LightGBMModel"
CATBOOST = "inferd.runtimes.catboost.CatBoostModel"
ONNX = "inferd.runtimes.onnx.OnnxModel"
MLFLOW = "inferd.runtimes.mlflow.MLflowModel"
HUGGINGFACE = "inferd.runtimes.huggingface.HuggingFaceModel"
VLLM = "inferd.runtimes.vllm.VLLMModel"

MLSERVER_SKLEARN = "mlserver_sklearn.SKLearnModel"
# MLServer's runtime names, so an MLServer model folder is served unchanged.
MLSERVER_RUNTIMES = {
    MLSERVER_SKLEARN: SKLEARN,
    "mlserver_xgboost.XGBoostModel": XGBOOST,
    "mlserver_lightgbm.LightGBMModel": LIGHTGBM,
    "mlserver_catboost.CatboostModel": CATBOOST,
    "mlserver_onnx.OnnxModel": ONNX,
    "mlserver_mlflow.MLflowRuntime": MLFLOW,
    "mlserver_huggingface.HuggingFaceRuntime": HUGGINGFACE,
}
