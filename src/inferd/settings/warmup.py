"""Warmup requests (``model_warmup`` in ``model-settings.json``), as Triton's.

A model may list requests to run in every worker that holds it, once it has
loaded and before it is READY: the first real request then finds caches filled,
kernels compiled and lazy imports done. A warmup that fails fails the load.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from inferd.tensors.datatypes import DATATYPES

# Triton's TYPE_* names of the V2 datatypes (TYPE_STRING is BYTES).
TRITON_DATATYPES: dict[str, str] = {
    **{f"TYPE_{name}": name for name in DATATYPES if name != "BYTES"},
    "TYPE_STRING": "BYTES",
}


class WarmupInputSettings(BaseModel):
    """One input of a warmup request: its type, shape and where its data comes from."""

    model_config = ConfigDict(extra="forbid")

    data_type: str
    """The datatype: a V2 name (``FP32``) or Triton's (``TYPE_FP32``)."""

    dims: list[int] = []
    """The shape, without the batch dimension when the model batches (see ``batch_size``)."""

    zero_data: bool = False
    """Fill it with zeros (empty strings for BYTES)."""

    random_data: bool = False
    """Fill it with random values (random digits for BYTES)."""

    input_data: Any = None
    """The data itself, as in a JSON inference request (flat or nested)."""

    input_data_file: str | None = None
    """Triton reads warmup data from a file; inferd does not (see the validator)."""

    @field_validator("data_type")
    @classmethod
    def _known_datatype(cls, value: str) -> str:
        datatype = TRITON_DATATYPES.get(value, value)
        if datatype not in DATATYPES:
            raise ValueError(
                f"unknown data_type {value!r}; expected one of {', '.join(DATATYPES)} "
                "or Triton's TYPE_* names"
            )
        return datatype

    @field_validator("dims")
    @classmethod
    def _fixed_dims(cls, value: list[int]) -> list[int]:
        if any(dim < 0 for dim in value):
            raise ValueError("warmup dims must be fixed sizes (no -1)")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> WarmupInputSettings:
        if self.input_data_file is not None:
            raise ValueError(
                "input_data_file is not supported: give the data inline (input_data) "
                "or generate it (zero_data / random_data)"
            )
        sources = [self.zero_data, self.random_data, self.input_data is not None]
        if sum(sources) != 1:
            raise ValueError("set exactly one of zero_data, random_data or input_data")
        return self


class WarmupSettings(BaseModel):
    """One warmup request, run ``count`` times in every worker holding the model."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    """Names it in logs and in the error of a load it failed."""

    batch_size: int = Field(default=1, ge=1)
    """Rows of the request when the model batches (``max_batch_size`` > 1): each
    input's shape is then ``[batch_size, *dims]``; else its shape is ``dims``."""

    count: int = Field(default=1, ge=1)
    """How many times it runs, one after another."""

    inputs: dict[str, WarmupInputSettings] = {}
    """The request's inputs, by name."""
