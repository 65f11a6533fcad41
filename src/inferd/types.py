"""Core types: tensors, inference requests and responses, metadata.

These are plain slotted dataclasses, not pydantic models: they are built once per
request on the hot path and must be cheap. Tensor data is always a numpy array
already shaped as the tensor (BYTES tensors are object arrays of ``bytes``).
The wire layers (``server/``) validate input while decoding into these types.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.errors import InvalidRequest
from inferd.tensors.datatypes import datatype_of

Parameters = dict[str, Any]


@dataclass(slots=True)
class Tensor:
    """A named tensor: one input of a request or one output of a response."""

    name: str
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def datatype(self) -> str:
        return datatype_of(self.data.dtype)

    @property
    def content_type(self) -> str | None:
        return content_type_of(self.parameters)


def content_type_of(parameters: Parameters) -> str | None:
    """The ``content_type`` parameter, if it is a string."""
    value = parameters.get("content_type")
    return value if isinstance(value, str) else None


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for by name, with its per-output parameters."""

    name: str
    parameters: Parameters = field(default_factory=dict)


def refuse_repeated_outputs(names: list[str]) -> None:
    """One answer per output name: a repeat would only multiply the work (both codecs)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidRequest(f"output '{name}' already requested (it appears more than once)")
        seen.add(name)


def repeated_input(name: str) -> InvalidRequest:
    """A request naming an input twice, in Triton's words (both codecs)."""
    return InvalidRequest(f"input '{name}' already exists in request (it appears more than once)")


@dataclass(slots=True)
class InferenceRequest:
    inputs: list[Tensor]
    id: str | None = None
    parameters: Parameters = field(default_factory=dict)
    outputs: list[RequestedOutput] = field(default_factory=list)
    # Set on a batch of requests stacked into this one (dispatch/batching.py): each
    # one's row count, in order. A runtime that answers each request on its own
    # (Triton's Python backend: execute gets every request) cuts its inputs by it.
    batch_rows: tuple[int, ...] = ()
    # When the request's ``timeout`` runs out (time.monotonic(), the same clock in every
    # process of a machine), set by the dataplane that took it; None: no timeout. The
    # calls its model makes to other models carry what is left (model_calls.py).
    deadline: float | None = None

    def input(self, name: str) -> Tensor:
        """The input called ``name``; KeyError if the request has none."""
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        raise KeyError(name)

    @property
    def output_names(self) -> list[str]:
        return [output.name for output in self.outputs]

    @property
    def content_type(self) -> str | None:
        return content_type_of(self.parameters)


@dataclass(slots=True)
class InferenceResponse:
    outputs: list[Tensor]
    model_name: str = ""
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters = field(default_factory=dict)

    def output(self, name: str) -> Tensor:
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        raise KeyError(name)


@dataclass(slots=True)
class MetadataTensor:
    """What a model declares about one of its inputs or outputs.

    A ``-1`` in ``shape`` stands for a dimension of any size.
    """

    name: str
    datatype: str
    shape: list[int]
    parameters: Parameters = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "datatype": self.datatype, "shape": self.shape}
        return _with_parameters(out, self.parameters)


@dataclass(slots=True)
class ModelMetadata:
    name: str
    platform: str = ""
    versions: list[str] = field(default_factory=list)
    inputs: list[MetadataTensor] = field(default_factory=list)
    outputs: list[MetadataTensor] = field(default_factory=list)
    parameters: Parameters = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "versions": self.versions,
            "platform": self.platform,
            "inputs": [tensor.to_dict() for tensor in self.inputs],
            "outputs": [tensor.to_dict() for tensor in self.outputs],
        }
        return _with_parameters(out, self.parameters)


def _with_parameters(out: dict[str, Any], parameters: Parameters) -> dict[str, Any]:
    """``out``, with ``parameters`` when there are any (the protocol leaves them out)."""
    if parameters:
        out["parameters"] = parameters
    return out


@dataclass(slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "extensions": self.extensions}


class ModelState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(slots=True)
class RepositoryEntry:
    """One row of the repository index."""

    name: str
    version: str | None
    state: ModelState
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version or "",
            "state": self.state.value,
            "reason": self.reason,
        }
