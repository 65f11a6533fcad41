"""The REST answers' bodies, as msgspec Structs: what the OpenAPI document says.

The server writes its answers with orjson (numpy straight to JSON, no Struct per
request, codec.py); these Structs describe those answers for the OpenAPI document
(server/docs/pages.py), and the e2e schemathesis test checks every answer against them.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from inferd.types import ModelState

Dimension = Annotated[int, msgspec.Meta(ge=0)]
Parameters = Annotated[dict[str, Any], msgspec.Meta(description="Free-form parameters")]


class ErrorBody(msgspec.Struct):
    """Every error answer: what was wrong and, where it helps, what to do."""

    error: str


class LiveBody(msgspec.Struct):
    live: bool


class ReadyBody(msgspec.Struct):
    ready: bool


class ModelReadyBody(msgspec.Struct):
    name: str
    ready: bool


class ServerMetadataBody(msgspec.Struct):
    name: str
    version: str
    extensions: list[str]


class MetadataTensorBody(msgspec.Struct):
    """An input or output a model declares; -1 in ``shape`` is a dimension of any size."""

    name: str
    datatype: str
    shape: list[Annotated[int, msgspec.Meta(ge=-1)]]
    parameters: Parameters | UnsetType = UNSET


class ModelMetadataBody(msgspec.Struct):
    name: str
    versions: list[str]
    platform: str
    inputs: list[MetadataTensorBody]
    outputs: list[MetadataTensorBody]
    parameters: Parameters | UnsetType = UNSET


class ResponseOutputBody(msgspec.Struct):
    """One output tensor: flat ``data`` in row-major order, or ``binary_data_size`` bytes
    after the JSON header when the binary tensor extension was asked for."""

    name: str
    datatype: str
    shape: list[Dimension]
    # null stands for a float that JSON cannot hold (NaN, infinity).
    data: list[bool | int | float | str | None] | UnsetType = UNSET
    parameters: Parameters | UnsetType = UNSET


class InferenceResponseBody(msgspec.Struct):
    model_name: str
    outputs: list[ResponseOutputBody]
    model_version: str | UnsetType = UNSET
    id: str | UnsetType = UNSET
    parameters: Parameters | UnsetType = UNSET


class RepositoryIndexEntryBody(msgspec.Struct):
    """A model version the server knows: loaded, loading, failed, or only on disk.

    ``version`` is "" for an unversioned model; ``reason`` says why it is not READY.
    """

    name: str
    version: str
    state: ModelState
    reason: str


class StatisticDurationBody(msgspec.Struct):
    count: int
    ns: int


class InferStatisticsBody(msgspec.Struct):
    """Cumulative counts and nanoseconds, as Triton's statistics extension defines them."""

    success: StatisticDurationBody
    fail: StatisticDurationBody
    queue: StatisticDurationBody
    compute_input: StatisticDurationBody
    compute_infer: StatisticDurationBody
    compute_output: StatisticDurationBody
    cache_hit: StatisticDurationBody
    cache_miss: StatisticDurationBody


class InferBatchStatisticsBody(msgspec.Struct):
    batch_size: int
    compute_input: StatisticDurationBody
    compute_infer: StatisticDurationBody
    compute_output: StatisticDurationBody


class ModelStatisticsBody(msgspec.Struct):
    """One model version's statistics (``version`` "" when unversioned);
    ``last_inference`` is in milliseconds since the epoch (0: never)."""

    name: str
    version: str
    last_inference: int
    inference_count: int
    execution_count: int
    inference_stats: InferStatisticsBody
    batch_stats: list[InferBatchStatisticsBody]
    memory_usage: list[dict[str, Any]]


class ModelStatisticsResponseBody(msgspec.Struct):
    model_stats: list[ModelStatisticsBody]


class EmptyBody(msgspec.Struct, forbid_unknown_fields=True):
    """The empty object ``{}``."""
