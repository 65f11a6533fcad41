"""MLServer's ``mlserver.types``: the pydantic models of the Open Inference Protocol.

Field names, optionality and ``model_dump`` defaults (unset and None fields left
out) are MLServer 1.7's, so runtime code that reads or builds them works as it
does there. inferd builds these only for ``MLModel`` runtimes, with
``model_construct`` (no validation): numeric tensor data arrives as a flat numpy
array (indexable, iterable and ``len``-able like MLServer's list; ``model_dump``
turns it into a list), BYTES data as a list of ``bytes``.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import numpy as np
import pydantic
from pydantic import ConfigDict, Field, PlainSerializer, RootModel


class BaseModel(pydantic.BaseModel):
    """Dumps leave out unset and None fields, as MLServer's do."""

    model_config = ConfigDict(protected_namespaces=(), use_enum_values=True)

    def model_dump(
        self, exclude_unset: bool = True, exclude_none: bool = True, **kwargs: Any
    ) -> Any:
        return super().model_dump(exclude_unset=exclude_unset, exclude_none=exclude_none, **kwargs)

    def model_dump_json(
        self, exclude_unset: bool = True, exclude_none: bool = True, **kwargs: Any
    ) -> str:
        return super().model_dump_json(
            exclude_unset=exclude_unset, exclude_none=exclude_none, **kwargs
        )

    def dict(self, **kwargs: Any) -> Any:
        return self.model_dump(**kwargs)

    def json(self, **kwargs: Any) -> str:
        return self.model_dump_json(**kwargs)


class Parameters(BaseModel):
    model_config = ConfigDict(extra="allow")

    content_type: str | None = None
    headers: dict[str, Any] | None = None


def _plain_data(value: Any) -> Any:
    """numpy data dumps as the list MLServer would hold (NaN as None, as MLServer's
    NumpyCodec writes it)."""
    if not isinstance(value, np.ndarray):
        return value
    items = value.tolist()
    if value.dtype.kind == "f" and np.isnan(value).any():
        return [None if item != item else item for item in items]
    return items


class TensorData(RootModel[Any]):
    root: Annotated[Any, PlainSerializer(_plain_data)] = Field(..., title="TensorData")

    def __iter__(self) -> Any:
        return iter(self.root)

    def __getitem__(self, index: Any) -> Any:
        return self.root[index]

    def __len__(self) -> int:
        return len(self.root)


class Datatype(Enum):
    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BYTES = "BYTES"


class MetadataServerResponse(BaseModel):
    name: str
    version: str
    extensions: list[str]


class MetadataServerErrorResponse(BaseModel):
    error: str


class MetadataModelErrorResponse(BaseModel):
    error: str


class InferenceErrorResponse(BaseModel):
    error: str | None = None


class RequestOutput(BaseModel):
    name: str
    parameters: Parameters | None = None


class MetadataTensor(BaseModel):
    name: str
    datatype: Datatype
    shape: list[int]
    parameters: Parameters | None = None


class RequestInput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: Parameters | None = None
    data: TensorData


class ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: Parameters | None = None
    data: TensorData


class InferenceResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters | None = None
    outputs: list[ResponseOutput]


class MetadataModelResponse(BaseModel):
    name: str
    versions: list[str] | None = None
    platform: str
    inputs: list[MetadataTensor] | None = None
    outputs: list[MetadataTensor] | None = None
    parameters: Parameters | None = None


class InferenceRequest(BaseModel):
    id: str | None = None
    parameters: Parameters | None = None
    inputs: list[RequestInput]
    outputs: list[RequestOutput] | None = None


class RepositoryIndexRequest(BaseModel):
    ready: bool | None = None


class State(Enum):
    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


class RepositoryIndexResponseItem(BaseModel):
    name: str
    version: str | None = None
    state: State
    reason: str


class RepositoryIndexResponse(RootModel[list[RepositoryIndexResponseItem]]):
    root: list[RepositoryIndexResponseItem] = Field(..., title="repository_index_response")


class RepositoryIndexErrorResponse(BaseModel):
    error: str | None = None


class RepositoryLoadErrorResponse(BaseModel):
    error: str | None = None


class RepositoryUnloadErrorResponse(BaseModel):
    error: str | None = None
