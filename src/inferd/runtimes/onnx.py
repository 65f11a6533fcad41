"""ONNX models run with ONNX Runtime.

``model-settings.json``::

    {"name": "resnet", "implementation": "inferd.runtimes.onnx.OnnxModel",
     "parameters": {"uri": "./model.onnx",
                    "extra": {"intra_op_threads": 2, "inter_op_threads": 1}}}

``uri`` names the ``.onnx`` file, or a folder holding ``model.onnx`` or a
single ``*.onnx`` file. The model's metadata is read from the graph: input and
output names, datatypes, and shapes with -1 for dynamic dimensions.

A request carries one input per graph input, matched by name; a numeric input
is cast to the graph's type when that keeps its kind of number (FP64 -> FP32).
Every graph output is returned, or those the request names, each with the
shape ONNX Runtime gives it. Outputs that are not tensors (sequences and maps,
such as skl2onnx's ZipMap) are sent as BYTES, one JSON document per row.

``parameters.extra``: ``intra_op_threads`` and ``inter_op_threads`` (threads
within one operator and across independent operators; 0 or unset lets ONNX
Runtime choose) and ``providers`` (execution providers in order of preference;
default: CUDA for a worker assigned a ``cuda`` device, else CPU).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidRequest, ModelNotReady
from inferd.model import Model
from inferd.runtimes.common import (
    cast_input,
    import_and_find,
    requested_outputs,
    response,
    unusable_input,
    warn_unread_extra,
    with_derived_metadata,
)
from inferd.tensors import codecs
from inferd.tensors.datatypes import NUMPY_BY_DATATYPE
from inferd.tensors.encoding import to_output_array
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata, Tensor

logger = logging.getLogger(__name__)

# Well-known file names, else the one file with one of these suffixes.
FILES = (("model.onnx",), (".onnx",))
THREAD_SETTINGS = {
    "intra_op_threads": "intra_op_num_threads",
    "inter_op_threads": "inter_op_num_threads",
}
KNOWN_EXTRA = (*THREAD_SETTINGS, "providers")
CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"

# ONNX Runtime's element types -> Open Inference Protocol datatypes.
DATATYPE_BY_ONNX_TYPE = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}
STRING_TYPE = "tensor(string)"


@dataclass(frozen=True, slots=True)
class GraphTensor:
    """One graph input or output as the protocol sees it."""

    name: str
    onnx_type: str
    shape: list[int]  # -1 for a dynamic dimension
    symbols: tuple[str | None, ...]  # a named dynamic dimension ("batch") has one size per call

    @property
    def is_tensor(self) -> bool:
        return self.onnx_type.startswith("tensor(")

    @property
    def datatype(self) -> str:
        return DATATYPE_BY_ONNX_TYPE.get(self.onnx_type, "BYTES")

    def metadata(self) -> MetadataTensor:
        if self.onnx_type == STRING_TYPE:
            return MetadataTensor(self.name, "BYTES", self.shape, {"content_type": codecs.STRING})
        if not self.is_tensor:  # a sequence or map: one JSON document per row
            return MetadataTensor(self.name, "BYTES", [-1], {"content_type": codecs.PANDAS_JSON})
        return MetadataTensor(self.name, self.datatype, self.shape)

    def accepts(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            want in (-1, got) for want, got in zip(self.shape, shape, strict=True)
        )


def graph_tensor(node: Any, role: str) -> GraphTensor:
    """A GraphTensor from ONNX Runtime's NodeArg; types that cannot travel fail the load.

    Outputs may also be sequences or maps (sent as JSON); inputs must be tensors.
    """
    onnx_type = str(node.type)
    usable = onnx_type in DATATYPE_BY_ONNX_TYPE or (
        role == "output" and not onnx_type.startswith("tensor(")
    )
    if not usable:
        raise ValueError(
            f"Graph {role} {node.name!r} has type {onnx_type}, which the Open Inference "
            f"Protocol cannot carry; supported: {', '.join(DATATYPE_BY_ONNX_TYPE)}"
        )
    # Dynamic dimensions come as names ("batch") or None.
    dims = list(node.shape or [])
    shape = [dim if isinstance(dim, int) and dim >= 0 else -1 for dim in dims]
    symbols = tuple(dim if isinstance(dim, str) else None for dim in dims)
    return GraphTensor(node.name, onnx_type, shape, symbols)


class OnnxModel(Model):
    """Serves an ONNX graph through an ONNX Runtime inference session."""

    _session: Any = None
    _inputs: dict[str, GraphTensor] = {}
    _outputs: dict[str, GraphTensor] = {}
    _invalid_argument: type[Exception] = Exception

    async def load(self) -> bool:
        ort, path = await import_and_find(self, "onnxruntime", "onnx", FILES, "ONNX")
        # Optimising a big graph takes a while too: in a thread.
        self._session = await asyncio.to_thread(self._create_session, ort, path)
        self._inputs = {n.name: graph_tensor(n, "input") for n in self._session.get_inputs()}
        self._outputs = {n.name: graph_tensor(n, "output") for n in self._session.get_outputs()}
        return True

    def _create_session(self, ort: Any, path: Path) -> Any:
        self._invalid_argument = ort.capi.onnxruntime_pybind11_state.InvalidArgument
        options = ort.SessionOptions()
        for key, attribute in THREAD_SETTINGS.items():
            setattr(options, attribute, self._thread_count(key))
        warn_unread_extra(self, KNOWN_EXTRA)
        providers = self._providers(ort.get_available_providers())
        return ort.InferenceSession(str(path), options, providers=providers)

    def _thread_count(self, key: str) -> int:
        value = self.settings.extra.get(key, 0)
        if type(value) is not int or value < 0:
            raise ValueError(
                f"Model {self.name!r}: parameters.extra.{key} is {value!r}; use a whole number "
                "of threads, or 0 to let ONNX Runtime choose"
            )
        return value

    def _providers(self, available: list[str]) -> list[Any]:
        configured = self.settings.extra.get("providers")
        if configured is not None:
            if not isinstance(configured, list) or not all(isinstance(p, str) for p in configured):
                raise ValueError(
                    f"Model {self.name!r}: parameters.extra.providers must be a list of "
                    f"execution provider names, e.g. [{CPU_PROVIDER!r}]; available: "
                    f"{', '.join(available)}"
                )
            return list(configured)
        device = self.context.device or ""
        if device.startswith("cuda") and CUDA_PROVIDER in available:
            _, _, index = device.partition(":")
            return [(CUDA_PROVIDER, {"device_id": int(index or 0)}), CPU_PROVIDER]
        return [CPU_PROVIDER]

    # Plain def: session.run releases the GIL and nothing here awaits.
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if self._session is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        all_outputs = tuple(self._outputs)
        names = requested_outputs(self, request, all_outputs, all_outputs)
        feeds = self._feeds(request)
        try:
            results = self._session.run(list(names), feeds)
        except self._invalid_argument as error:  # shapes the graph's own checks refuse
            raise unusable_input(self, error, "inputs") from error
        outputs = [self._output(name, value) for name, value in zip(names, results, strict=True)]
        return response(self, request, outputs)

    def _feeds(self, request: InferenceRequest) -> dict[str, np.ndarray]:
        given = {tensor.name: tensor for tensor in request.inputs}
        unknown = [name for name in given if name not in self._inputs]
        missing = [name for name in self._inputs if name not in given]
        if unknown or missing:
            raise InvalidRequest(
                f"Model {self.name!r} takes the inputs {self._describe_inputs()}; "
                + (f"missing {', '.join(map(repr, missing))}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown {', '.join(map(repr, unknown))}" if unknown else "")
            )
        feeds = {name: self._feed(spec, given[name]) for name, spec in self._inputs.items()}
        self._check_named_dimensions(feeds)
        return feeds

    def _check_named_dimensions(self, feeds: dict[str, np.ndarray]) -> None:
        """Inputs sharing a named dimension ("batch") must agree on its size, which
        ONNX Runtime would only find out inside some operator."""
        seen: dict[str, tuple[str, int]] = {}
        for name, spec in self._inputs.items():
            for symbol, size in zip(spec.symbols, feeds[name].shape, strict=True):
                if symbol is None:
                    continue
                first = seen.setdefault(symbol, (name, size))
                if first[1] != size:
                    raise InvalidRequest(
                        f"Inputs {first[0]!r} and {name!r} of model {self.name!r} share the "
                        f"dimension {symbol!r}, but have sizes {first[1]} and {size}"
                    )

    def _feed(self, spec: GraphTensor, tensor: Tensor) -> np.ndarray:
        if not spec.accepts(tensor.shape):
            raise InvalidRequest(
                f"Input {spec.name!r} has shape {list(tensor.shape)}, but model {self.name!r} "
                f"expects shape {spec.shape}"
            )
        if spec.onnx_type == STRING_TYPE:
            texts = codecs.decode_tensor(tensor, codecs.STRING)
            return np.array(texts, dtype=object).reshape(tensor.shape)
        if tensor.data.dtype.kind == "O":
            raise InvalidRequest(
                f"Input {spec.name!r} of model {self.name!r} must be {spec.datatype}, got BYTES"
            )
        return cast_input(spec.name, tensor.data, NUMPY_BY_DATATYPE[spec.datatype])

    def _describe_inputs(self) -> str:
        return ", ".join(f"{s.name!r} {s.datatype} {s.shape}" for s in self._inputs.values())

    def _output(self, name: str, value: Any) -> Tensor:
        if not isinstance(value, np.ndarray):  # a sequence or map output
            return self.encode(name, list(value), codecs.PANDAS_JSON)
        if value.dtype.kind in "OU":  # a string tensor: UTF-8 BYTES in the graph's shape
            return Tensor(name, to_output_array(value), {"content_type": codecs.STRING})
        return Tensor(name, value)

    def metadata(self) -> ModelMetadata:
        metadata = super().metadata()
        if self._session is None:
            return metadata
        inputs = [spec.metadata() for spec in self._inputs.values()]
        outputs = [spec.metadata() for spec in self._outputs.values()]
        return with_derived_metadata(metadata, inputs, outputs)
