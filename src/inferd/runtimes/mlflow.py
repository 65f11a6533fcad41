"""MLflow models in the pyfunc format (MLServer's ``mlserver_mlflow``).

``model-settings.json``::

    {"name": "wine", "implementation": "inferd.runtimes.mlflow.MLflowModel",
     "parameters": {"uri": "./model"}}

``uri`` is the model's folder (the one holding ``MLmodel``), loaded from local
files with ``mlflow.pyfunc.load_model``. The model's signature says how it is
served, as in MLServer:

- metadata: one input per signature column or tensor (columns as ``[-1, 1]``
  with the content type of their type), the outputs likewise, and the
  model-level content type: ``pd`` for a column-based signature, ``np`` for one
  unnamed tensor, ``dict`` for named tensors;
- inputs: a column-based model gets a DataFrame with one column per input, a
  model of named tensors a dict of arrays by input name (each cast to the
  signature's dtype when that keeps its kind of number), any other model its
  one input array (or a dict, for several inputs);
- parameters: request parameters that the signature's params schema declares
  are passed to ``predict`` as ``params``.

Outputs: an array is sent as ``output-1``, a DataFrame as one output per
column and a dict as one output per key. Inputs that break the signature get
a 400 with MLflow's reason.
"""

from __future__ import annotations

import asyncio
import enum
from pathlib import Path
from typing import Any

import numpy as np

from inferd.custom_calls import handler_call
from inferd.errors import InvalidRequest, ModelNotReady
from inferd.model import Model
from inferd.runtimes import mlflow_scoring
from inferd.runtimes.common import (
    cast_input,
    import_framework,
    response,
    short_error,
    with_derived_metadata,
)
from inferd.tensors import codecs
from inferd.tensors.datatypes import datatype_of
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata, Tensor

MLMODEL_FILE = "MLmodel"
TENSOR_DICT = "dict"
"""MLServer's content type for a dict of named tensors."""
SCHEMA_ERROR_CODE = "INVALID_PARAMETER_VALUE"

# MLflow column types -> (datatype, content type), as MLServer's mlserver_mlflow.
COLUMN_TYPES = {
    "boolean": ("BOOL", codecs.NUMPY),
    "integer": ("INT32", codecs.NUMPY),
    "long": ("INT64", codecs.NUMPY),
    "float": ("FP32", codecs.NUMPY),
    "double": ("FP64", codecs.NUMPY),
    "string": ("BYTES", codecs.STRING),
    "binary": ("BYTES", codecs.BASE64),
    "datetime": ("BYTES", codecs.DATETIME),
}
"""Other column types (arrays, objects, maps, any) travel as JSON documents."""


def find_model_folder(uri: Path) -> Path:
    folder = uri.parent if uri.name == MLMODEL_FILE else uri
    if not (folder / MLMODEL_FILE).is_file():
        raise FileNotFoundError(
            f"No MLflow model at {uri}: it has no {MLMODEL_FILE} file; set parameters.uri "
            "in model-settings.json to the folder mlflow.<flavor>.save_model wrote"
        )
    return folder


def spec_metadata(spec: Any, default_name: str) -> MetadataTensor:
    """One signature column or tensor as the metadata MLServer reports for it."""
    name = spec.name or default_name
    if hasattr(spec, "shape"):  # a TensorSpec
        return MetadataTensor(
            name, datatype_of(spec.type), list(spec.shape), _content(codecs.NUMPY)
        )
    # Scalar column types are DataType enum members; arrays, objects and maps are not.
    type_name = spec.type.name if isinstance(spec.type, enum.Enum) else ""
    datatype, content_type = COLUMN_TYPES.get(type_name, ("BYTES", codecs.PANDAS_JSON))
    return MetadataTensor(name, datatype, [-1, 1], _content(content_type))


def _content(content_type: str) -> dict[str, Any]:
    return {"content_type": content_type}


def _read(pyfunc: Any, folder: Path) -> Any:
    try:
        return pyfunc.load_model(str(folder))
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"The MLflow model needs the Python package {error.name!r}, which is not "
            f"installed ({error}); install what the model's requirements.txt lists"
        ) from error


class MLflowModel(Model):
    """Serves an MLflow pyfunc model."""

    _model: Any = None
    _signature: Any = None
    _content_type: str | None = None
    _tensor_dtypes: dict[str, np.dtype] = {}
    _param_names: frozenset[str] = frozenset()
    _exception_type: type[Exception] = Exception
    # MLflow's scoring-server routes, served on the REST port as MLServer serves them.
    custom_routes = mlflow_scoring.ROUTES

    async def load(self) -> bool:
        # Importing MLflow and unpickling the model take seconds: in a thread, so the
        # event loop keeps answering. The install hint comes before file errors.
        pyfunc = await asyncio.to_thread(
            import_framework, "mlflow.pyfunc", type(self).__name__, "mlflow"
        )
        self._exception_type = import_framework(
            "mlflow.exceptions", type(self).__name__, "mlflow"
        ).MlflowException
        folder = find_model_folder(self.settings.uri)
        self._model = await asyncio.to_thread(_read, pyfunc, folder)
        self._signature = self._model.metadata.signature
        self._content_type = self._signature_content_type()
        self._tensor_dtypes = self._signature_dtypes()
        params = self._model.metadata.get_params_schema()
        self._param_names = frozenset(p.name for p in params.params) if params else frozenset()
        return True

    def _signature_content_type(self) -> str | None:
        if self._signature is None or self._signature.inputs is None:
            return None
        inputs = self._signature.inputs
        if not inputs.is_tensor_spec():
            return codecs.PANDAS
        return TENSOR_DICT if inputs.has_input_names() else codecs.NUMPY

    def _signature_dtypes(self) -> dict[str, np.dtype]:
        """The dtype of each named tensor input ("" for an unnamed one)."""
        if self._content_type not in (TENSOR_DICT, codecs.NUMPY):
            return {}
        return {spec.name or "": spec.type for spec in self._signature.inputs.inputs}

    # Plain def: pyfunc models are plain functions (see SKLearnModel.predict).
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if self._model is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        call = handler_call(request)
        if call is not None:  # MLflow's /invocations, /ping, ... (mlflow_scoring.py)
            return mlflow_scoring.answer(call, self._model)
        data = self._model_input(request)
        params = {k: v for k, v in request.parameters.items() if k in self._param_names}
        try:
            prediction = self._model.predict(data, params=params or None)
        except self._exception_type as error:
            if getattr(error, "error_code", None) != SCHEMA_ERROR_CODE:
                raise
            # MLflow's schema messages repeat the whole input before the reason.
            _, _, reason = str(error).rpartition("Error: ")
            raise InvalidRequest(
                f"Model {self.name!r} cannot use the request's inputs: {short_error(reason)}"
                f"{self._expected_inputs()}"
            ) from error
        return response(self, request, self._outputs(prediction))

    def _model_input(self, request: InferenceRequest) -> Any:
        content_type = request.content_type or self._content_type
        if content_type == codecs.PANDAS:
            return codecs.decode_request(request, codecs.PANDAS)
        if content_type == TENSOR_DICT or len(request.inputs) != 1:
            return {tensor.name: self._tensor(tensor, tensor.name) for tensor in request.inputs}
        return self._tensor(request.inputs[0], "")

    def _tensor(self, tensor: Tensor, signature_name: str) -> Any:
        value = codecs.decode_tensor(tensor)
        dtype = self._tensor_dtypes.get(signature_name)
        if dtype is None or not isinstance(value, np.ndarray) or value.dtype.kind == "O":
            return value
        return cast_input(tensor.name, value, dtype)

    def _expected_inputs(self) -> str:
        if self._signature is None:
            return ""
        expected = ", ".join(
            f"{t.name} {t.datatype} {t.shape}"
            for t in self._derived(self._signature.inputs, "input-", 0)
        )
        return f" (the model's signature takes {expected})"

    def _outputs(self, prediction: Any) -> list[Tensor]:
        if hasattr(prediction, "to_numpy") and not codecs.is_dataframe(prediction):
            prediction = prediction.to_numpy()  # a pandas Series
        if isinstance(prediction, list) and prediction and isinstance(prediction[0], (dict, list)):
            # Structured rows (e.g. from LLM flavors): one JSON document per row.
            return [self.encode(codecs.DEFAULT_OUTPUT_NAME, prediction, codecs.PANDAS_JSON)]
        return codecs.encode_outputs(prediction)

    def metadata(self) -> ModelMetadata:
        metadata = super().metadata()
        if self._signature is None:
            return metadata
        inputs = self._derived(self._signature.inputs, "input-", 0)
        # An unnamed output is sent as output-1 (MLServer's NumpyCodec name).
        outputs = self._derived(self._signature.outputs, "output-", 1)
        if self._content_type and "content_type" not in metadata.parameters:
            metadata.parameters["content_type"] = self._content_type
        return with_derived_metadata(metadata, inputs, outputs)

    @staticmethod
    def _derived(schema: Any, prefix: str, first: int) -> list[MetadataTensor]:
        if schema is None:
            return []
        return [
            spec_metadata(spec, f"{prefix}{index}")
            for index, spec in enumerate(schema.inputs, start=first)
        ]
