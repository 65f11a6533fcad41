"""inferd's numpy requests and responses <-> MLServer's pydantic ones.

Used only for ``MLModel`` runtimes. Requests are built with ``model_construct``
(no validation) and numeric tensors are passed as flat numpy views (no copy);
BYTES elements are passed as ``str`` where they are UTF-8 text (as MLServer hands
REST JSON data to a model), else as ``bytes``. Responses are read back with one
``np.asarray`` per output.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from inferd import types as core
from inferd.compat.construct import construct
from inferd.errors import ModelError
from inferd.tensors.datatypes import element_count, numpy_dtype

HEADERS = "headers"


class Conversion:
    """Converts with the pydantic types of one ``mlserver`` package (ours, or a real
    MLServer's when it is installed: the field names are the same)."""

    def __init__(self, types: ModuleType) -> None:
        self._request = types.InferenceRequest
        self._input = types.RequestInput
        self._output = types.RequestOutput
        self._parameters = types.Parameters
        self._data = types.TensorData

    def request(self, request: core.InferenceRequest) -> Any:
        outputs = [
            construct(
                self._output,
                {"name": output.name, "parameters": self._optional_parameters(output.parameters)},
            )
            for output in request.outputs
        ]
        values = {
            "id": request.id,
            "parameters": construct(self._parameters, request.parameters),
            "inputs": [self._request_input(tensor) for tensor in request.inputs],
            "outputs": outputs or None,
        }
        return construct(self._request, values)

    def _request_input(self, tensor: core.Tensor) -> Any:
        data = tensor.data
        payload: Any = data.reshape(-1)
        if data.dtype.kind == "O":
            payload = [_text_or_bytes(item) for item in payload.tolist()]
        values = {
            "name": tensor.name,
            "shape": list(data.shape),
            "datatype": tensor.datatype,
            "parameters": self._optional_parameters(tensor.parameters),
            "data": construct(self._data, {"root": payload}),
        }
        return construct(self._input, values)

    def _optional_parameters(self, parameters: dict[str, Any]) -> Any:
        return construct(self._parameters, parameters) if parameters else None


def _text_or_bytes(item: Any) -> Any:
    if isinstance(item, bytes):
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError:
            return item
    return item


def response_from_mlserver(response: Any, request_id: str | None) -> core.InferenceResponse:
    """An MLServer InferenceResponse as inferd's (numpy tensors, plain parameters)."""
    if not hasattr(response, "outputs") or not hasattr(response, "model_name"):
        raise ModelError(
            f"predict returned {type(response).__name__}, not an mlserver.types.InferenceResponse"
        )
    return core.InferenceResponse(
        outputs=[_tensor(output) for output in response.outputs],
        model_name=response.model_name,
        model_version=response.model_version,
        id=request_id,
        parameters=parameters_dict(response.parameters),
    )


def _tensor(output: Any) -> core.Tensor:
    data = output.data
    data = getattr(data, "root", data)
    datatype = _name(output.datatype)
    shape = tuple(output.shape)
    if datatype == "BYTES":
        array = _bytes_array(data)
    else:
        array = np.asarray(data, dtype=numpy_dtype(datatype))
    if array.shape != shape:
        if array.size != element_count(shape):
            raise ModelError(
                f"Output {output.name!r}: {array.size} elements do not fill shape {list(shape)}"
            )
        array = array.reshape(shape)
    return core.Tensor(output.name, array, parameters_dict(output.parameters))


def _bytes_array(data: Any) -> np.ndarray:
    items = data.reshape(-1).tolist() if isinstance(data, np.ndarray) else list(data)
    array = np.empty(len(items), dtype=object)
    array[:] = [item.encode("utf-8") if isinstance(item, str) else item for item in items]
    return array


def _name(datatype: Any) -> str:
    return str(getattr(datatype, "value", datatype))


def parameters_dict(parameters: Any) -> dict[str, Any]:
    """Set, non-None parameters as a dict (private ``_...`` entries left out)."""
    if parameters is None:
        return {}
    items: Any
    if isinstance(parameters, dict):
        items = parameters.items()
    else:
        extra = getattr(parameters, "__pydantic_extra__", None) or {}
        items = [*parameters.__dict__.items(), *extra.items()]
    return {key: value for key, value in items if value is not None and not key.startswith("_")}


def metadata_from_mlserver(metadata: Any) -> core.ModelMetadata:
    return core.ModelMetadata(
        name=metadata.name,
        platform=metadata.platform or "",
        versions=list(metadata.versions or []),
        inputs=[_metadata_tensor(tensor) for tensor in metadata.inputs or []],
        outputs=[_metadata_tensor(tensor) for tensor in metadata.outputs or []],
        parameters=parameters_dict(metadata.parameters),
    )


def _metadata_tensor(tensor: Any) -> core.MetadataTensor:
    return core.MetadataTensor(
        name=tensor.name,
        datatype=_name(tensor.datatype),
        shape=list(tensor.shape),
        parameters=parameters_dict(tensor.parameters),
    )
