"""The frameworks behind inferd's runtimes, as the tests import them.

CI installs every extra (``pip install -e '.[test]'``), so a missing framework
fails the tests that need it instead of skipping them silently. Set
``INFERD_ALLOW_MISSING_RUNTIMES=1`` to skip those tests on a machine that
installed only some extras.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from benchmarks.common.tiny_llm import TINY_VOCABULARY

ALLOW_MISSING = "INFERD_ALLOW_MISSING_RUNTIMES"


def require_module(name: str, extra: str) -> ModuleType:
    """``import name``; skip the calling test module if allowed, else fail with a hint."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        if os.environ.get(ALLOW_MISSING) == "1":
            pytest.skip(f"{name} is not installed ({error})", allow_module_level=True)
        raise ImportError(
            f"{name} is not installed ({error}): the runtime tests need every extra; run "
            f"pip install -e '.[test]' (or pip install 'inferd[{extra}]'), or set "
            f"{ALLOW_MISSING}=1 to skip them"
        ) from error


# ---- MLflow models ----------------------------------------------------------------

SCALE_MODEL_CODE = '''
import mlflow
from mlflow.pyfunc import PythonModel


class Scale(PythonModel):
    """Named tensors in and out; a `factor` parameter."""

    def predict(self, context, model_input, params=None):
        factor = (params or {}).get("factor", 1.0)
        x = model_input["x"]
        return {"scaled": x * factor, "total": x.sum(axis=1, keepdims=True) * factor}


mlflow.models.set_model(Scale())
'''


def save_mlflow_tensor_model(folder: Path) -> None:
    """A pyfunc model from code (nothing to unpickle) with a named-tensor signature
    (x: float32 [-1, 3]) and a params schema (factor: double, default 1)."""
    mlflow = require_module("mlflow", "mlflow")
    from mlflow.models import ModelSignature
    from mlflow.types import ParamSchema, ParamSpec, Schema, TensorSpec

    float32 = np.dtype(np.float32)
    signature = ModelSignature(
        inputs=Schema([TensorSpec(float32, (-1, 3), "x")]),
        outputs=Schema(
            [TensorSpec(float32, (-1, 3), "scaled"), TensorSpec(float32, (-1, 1), "total")]
        ),
        params=ParamSchema([ParamSpec("factor", "double", 1.0)]),
    )
    code = folder.parent / f"{folder.name}-code.py"
    code.write_text(SCALE_MODEL_CODE)
    # pip_requirements given: MLflow would otherwise run the model to infer them (slow).
    # MLflow warns that predict has no type hints (its own filter shows that once).
    mlflow.pyfunc.save_model(
        str(folder), python_model=str(code), signature=signature, pip_requirements=["mlflow"]
    )


def save_mlflow_frame_model(folder: Path) -> Any:
    """A scikit-learn flavor model fit on iris as a DataFrame (a column signature);
    returns the estimator."""
    mlflow_sklearn = require_module("mlflow.sklearn", "mlflow")
    from mlflow.models import infer_signature
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    frame, labels = load_iris(return_X_y=True, as_frame=True)
    frame.columns = [column.replace(" (cm)", "").replace(" ", "_") for column in frame.columns]
    estimator = LogisticRegression(max_iter=1000).fit(frame, labels)
    mlflow_sklearn.save_model(
        estimator,
        str(folder),
        signature=infer_signature(frame, estimator.predict(frame)),
        serialization_format="cloudpickle",  # skops, the default, is not in the mlflow extra
        pip_requirements=["scikit-learn"],
    )
    return estimator


# ---- Hugging Face -------------------------------------------------------------------

TINY_LABELS = {0: "NEGATIVE", 1: "POSITIVE"}


def save_tiny_text_classifier(folder: Path) -> None:
    """A 2-layer BERT for text-classification with random weights and a WordPiece
    tokenizer on a small vocabulary, written as save_pretrained does: no Hub."""
    torch = require_module("torch", "huggingface")
    transformers = require_module("transformers", "huggingface")
    folder.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (folder / "vocab.txt").write_text("\n".join(special + TINY_VOCABULARY) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        initializer_range=0.5,  # spread the random scores so that rows differ visibly
        id2label=TINY_LABELS,
        label2id={label: index for index, label in TINY_LABELS.items()},
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
