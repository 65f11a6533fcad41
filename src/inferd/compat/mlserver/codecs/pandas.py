"""DataFrames (request content type ``pd``), MLServer's ``mlserver.codecs.pandas``.

Each input (output) is one column. Where MLServer 1.7.1 raises (pandas' ``str``
dtype columns, datetime and nullable columns), inferd answers instead: text as
BYTES ``str``, datetimes as BYTES ``datetime`` (ISO 8601), nullable numbers as
numbers (NaN/None for missing values). pandas is optional: without it the codec
exists but cannot be used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.compat.mlserver.codecs.base import RequestCodec, register_request_codec
from inferd.compat.mlserver.codecs.json import decode_json_input_or_output, encode_to_json
from inferd.compat.mlserver.codecs.numpy import convert_nan, to_datatype, to_dtype
from inferd.compat.mlserver.codecs.string import StringCodec, as_input, encode_str
from inferd.compat.mlserver.codecs.utils import (
    InputOrOutput,
    get_decoded_or_raw,
    inject_batch_dimension,
)
from inferd.compat.mlserver.types import (
    Datatype,
    InferenceRequest,
    InferenceResponse,
    Parameters,
    ResponseOutput,
)

pd: Any
try:
    import pandas as pd
except ImportError:  # pragma: no cover - pandas is in the test environment
    pd = None

JSON_CONTENT_TYPE = "pd_json"


def _pandas() -> Any:
    if pd is None:
        raise ImportError("PandasCodec needs pandas: pip install inferd[pandas]")
    return pd


def _to_series(item: InputOrOutput) -> Any:
    pandas = _pandas()
    parameters = item.parameters
    if parameters is not None and parameters.content_type == JSON_CONTENT_TYPE:
        return pandas.Series(decode_json_input_or_output(item))
    payload = get_decoded_or_raw(item)
    payload = getattr(payload, "root", payload)
    if item.datatype in ("BYTES", Datatype.BYTES):
        return pandas.Series(list(payload) if isinstance(payload, np.ndarray) else payload)
    if isinstance(payload, np.ndarray) and payload.ndim > 1:
        payload = payload.reshape(item.shape[0], 1).squeeze(axis=1)
    return pandas.Series(payload, dtype=to_dtype(item))


def _column_datatype(series: Any) -> tuple[Datatype, list[Any], str | None]:
    """The column's datatype, its values (Python objects) and content type."""
    pandas = _pandas()
    dtype = series.dtype
    if pandas.api.types.is_datetime64_any_dtype(dtype):
        return Datatype.BYTES, [None if v is pd.NaT else v.isoformat() for v in series], "datetime"
    if pandas.api.types.is_string_dtype(dtype) and dtype.kind != "O":
        return Datatype.BYTES, series.tolist(), None
    if not isinstance(dtype, np.dtype) and (
        pandas.api.types.is_numeric_dtype(dtype) or pandas.api.types.is_bool_dtype(dtype)
    ):
        numbers = series.to_numpy(dtype=np.float64 if series.hasnans else dtype.numpy_dtype)
        return to_datatype(numbers.dtype), numbers.tolist(), None
    return to_datatype(dtype), series.tolist(), None


def _to_response_output(series: Any, use_bytes: bool = True) -> ResponseOutput:
    datatype, data, content_type = _column_datatype(series)
    if series.isnull().any():
        data = [convert_nan(item) for item in data]
    if datatype == Datatype.BYTES and content_type is None:
        processed, content_type = _process_bytes(data, use_bytes)
        if content_type is None:
            data = [encode_to_json(item, use_bytes) for item in data]
            content_type = JSON_CONTENT_TYPE
        else:
            data = processed
    elif datatype == Datatype.BYTES and use_bytes:
        data = [encode_str(item) if isinstance(item, str) else item for item in data]
    fields: dict[str, Any] = {"data": data, "datatype": datatype}
    return ResponseOutput(
        **fields,
        name=series.name,
        shape=inject_batch_dimension(list(series.shape)),
        parameters=Parameters(content_type=content_type) if content_type else None,
    )


def _process_bytes(data: list[Any], use_bytes: bool = True) -> tuple[list[Any], str | None]:
    """Text (as bytes when ``use_bytes``) tagged ``str`` if every item is text or
    bytes; else no content type (the caller writes JSON)."""
    content_type: str | None = StringCodec.ContentType
    processed = []
    for item in data:
        if not isinstance(item, str | bytes):
            content_type = None
        elif isinstance(item, str) and use_bytes:
            item = encode_str(item)
        processed.append(item)
    return processed, content_type


@register_request_codec
class PandasCodec(RequestCodec):
    """A request (response) as a DataFrame with one column per input (output)."""

    ContentType = "pd"
    JsonContentType = JSON_CONTENT_TYPE
    TypeHint = pd.DataFrame if pd is not None else type(None)

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return pd is not None and isinstance(payload, pd.DataFrame)

    @classmethod
    def encode_response(
        cls,
        model_name: str,
        payload: Any,
        model_version: str | None = None,
        use_bytes: bool = True,
        **kwargs: Any,
    ) -> InferenceResponse:
        return InferenceResponse(
            model_name=model_name,
            model_version=model_version,
            parameters=Parameters(content_type=cls.ContentType),
            outputs=cls.encode_outputs(payload, use_bytes=use_bytes),
        )

    @classmethod
    def decode_response(cls, response: InferenceResponse) -> Any:
        return _pandas().DataFrame({item.name: _to_series(item) for item in response.outputs})

    @classmethod
    def encode_outputs(cls, payload: Any, use_bytes: bool = True) -> list[ResponseOutput]:
        return [_to_response_output(payload[column], use_bytes) for column in payload]

    @classmethod
    def encode_request(
        cls, payload: Any, use_bytes: bool = True, **kwargs: Any
    ) -> InferenceRequest:
        outputs = cls.encode_outputs(payload, use_bytes=use_bytes)
        return InferenceRequest(
            parameters=Parameters(content_type=cls.ContentType),
            inputs=[as_input(output) for output in outputs],
        )

    @classmethod
    def decode_request(cls, request: InferenceRequest) -> Any:
        return _pandas().DataFrame({item.name: _to_series(item) for item in request.inputs})
