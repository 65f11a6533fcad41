"""Codec calls written against MLServer 1.7's documented API, and what they give.

Run as a script (``python mlserver_codec_cases.py``) it prints every case's result
as JSON: under MLServer's own Python that is MLServer's behaviour, under inferd's
(with the ``mlserver`` alias installed) ours. tests/unit/test_mlserver_codecs.py
compares ours with the results recorded from MLServer 1.7.1
(mlserver_codec_expected.json) and, when MLServer's Python is known, with a live run.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any, List, Tuple  # noqa: UP035 - hints as MLServer users write them

import numpy as np
import pandas as pd
from mlserver.codecs import (
    Base64Codec,
    DatetimeCodec,
    NumpyCodec,
    NumpyRequestCodec,
    PandasCodec,
    StringCodec,
    StringRequestCodec,
    decode_args,
)
from mlserver.types import InferenceRequest, RequestInput


def _input(name: str, datatype: str, shape: list[int], data: Any, **parameters: Any) -> Any:
    return RequestInput(
        name=name, datatype=datatype, shape=shape, data=data, parameters=parameters or None
    )


def _request(*inputs: dict[str, Any], **parameters: Any) -> InferenceRequest:
    return InferenceRequest(inputs=list(inputs), parameters=parameters or None)


class _Typed:
    """A model's predict with typed arguments, as @decode_args documents it."""

    name, version = "typed", "v1"

    @decode_args
    async def predict(self, a: np.ndarray, words: List[str]) -> Tuple[np.ndarray, List[str]]:  # noqa: UP006
        return a.sum(axis=-1), [word.upper() for word in words]


def _run_decode_args() -> Any:
    import asyncio

    request = _request(
        {"name": "a", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]},
        {"name": "words", "datatype": "BYTES", "shape": [2], "data": ["x", "yz"]},
    )
    return asyncio.run(_Typed().predict(request))


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"a": [1, 2], "f": [0.5, np.nan], "o": [{"k": 1}, [1]], "b": [True, False]})


CASES: dict[str, Callable[[], Any]] = {
    "np_out_1d": lambda: NumpyCodec.encode_output("o", np.array([1, 2, 3], dtype=np.int32)),
    "np_out_2d_nan": lambda: NumpyCodec.encode_output("o", np.array([[1.5, 2], [3, np.nan]])),
    "np_out_text": lambda: NumpyCodec.encode_output("o", np.array(["a", "bc"])),
    "np_out_bool": lambda: NumpyCodec.encode_output("o", np.array([True, False])),
    "np_out_scalar": lambda: NumpyCodec.encode_output("o", np.array(3.0, dtype=np.float32)),
    "np_in": lambda: NumpyCodec.encode_input("i", np.array([[1, 2]], dtype=np.float32)),
    "np_decode": lambda: NumpyCodec.decode_input(_input("i", "FP32", [2, 2], [1, 2, 3, 4])),
    "np_decode_text": lambda: NumpyCodec.decode_input(_input("i", "BYTES", [2], ["a", "b"])),
    "str_out": lambda: StringCodec.encode_output("o", ["a", "é"]),
    "str_out_no_bytes": lambda: StringCodec.encode_output("o", ["a", "é"], use_bytes=False),
    "str_in": lambda: StringCodec.encode_input("i", ["a"]),
    "str_decode": lambda: StringCodec.decode_input(_input("i", "BYTES", [2], [b"a", "b"])),
    "str_decode_one": lambda: StringCodec.decode_input(_input("i", "BYTES", [1], "abc")),
    "b64_out": lambda: Base64Codec.encode_output("o", [b"\x00\x01", b"hi"]),
    "b64_out_no_bytes": lambda: Base64Codec.encode_output("o", [b"hi"], use_bytes=False),
    "b64_decode": lambda: [
        item.hex()
        for item in Base64Codec.decode_input(_input("i", "BYTES", [2], ["AAE=", "not base64!"]))
    ],
    "dt_out": lambda: DatetimeCodec.encode_output(
        "o", [dt.datetime(2021, 8, 24, 15, 1, 19), "2020-01-01"]
    ),
    "dt_out_no_bytes": lambda: DatetimeCodec.encode_output(
        "o", [dt.datetime(2021, 8, 24)], use_bytes=False
    ),
    "dt_decode": lambda: [
        item.isoformat()
        for item in DatetimeCodec.decode_input(_input("i", "BYTES", [1], ["2021-08-24T15:01:19"]))
    ],
    "pd_out": lambda: PandasCodec.encode_response("m", _frame(), "v1"),
    "pd_out_no_bytes": lambda: PandasCodec.encode_response(
        "m", pd.DataFrame({"o": [{"k": 1}, [1]]}), use_bytes=False
    ),
    "pd_decode": lambda: PandasCodec.decode_request(
        _request(
            {"name": "a", "datatype": "INT32", "shape": [2], "data": [1, 2]},
            {"name": "f", "datatype": "FP32", "shape": [2, 1], "data": [1.5, 2]},
            {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["x", "y"]},
            {
                "name": "j",
                "datatype": "BYTES",
                "shape": [2],
                "data": ['{"k":1}', "[2]"],
                "parameters": {"content_type": "pd_json"},
            },
        )
    ),
    "pd_request": lambda: PandasCodec.encode_request(pd.DataFrame({"a": [1, 2]})),
    "np_request_response": lambda: NumpyRequestCodec.encode_response(
        "m", np.array([1.0, 2.0]), "v"
    ),
    "np_request_decode": lambda: NumpyRequestCodec.decode_request(
        _request({"name": "x", "datatype": "INT64", "shape": [3], "data": [1, 2, 3]})
    ),
    "str_request_response": lambda: StringRequestCodec.encode_response("m", ["a"]),
    "str_request_request": lambda: StringRequestCodec.encode_request(["a", "b"]),
    "decode_args": _run_decode_args,
}


def plain(value: Any) -> Any:
    """A result as JSON-able data that says what it is."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, pd.DataFrame):
        columns = {column: [str(item) for item in value[column]] for column in value}
        return {"frame": columns, "dtypes": {c: str(t) for c, t in value.dtypes.items()}}
    return value


def run_cases() -> dict[str, Any]:
    results = {}
    for name, case in CASES.items():
        try:
            results[name] = plain(case())
        except Exception as error:  # a case MLServer refuses is recorded as such
            results[name] = f"error: {type(error).__name__}"
    # One JSON round trip: bytes as text, tuples as lists, as both sides compare them.
    return dict(json.loads(json.dumps(results, default=_bytes_as_text, sort_keys=True)))


def _bytes_as_text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(type(value).__name__)


if __name__ == "__main__":
    print(json.dumps(run_cases(), sort_keys=True, indent=1))
