"""MLServer's codecs as inferd serves them (``import mlserver`` resolving to
inferd.compat.mlserver), against MLServer 1.7.1's own results."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inferd.compat.importer import install_mlserver_alias

assert install_mlserver_alias(), "these tests need the alias: is a real MLServer installed?"

from mlserver.codecs import (  # noqa: E402 - after the alias is installed
    CodecNotFound,
    InputCodec,
    NumpyCodec,
    PandasCodec,
    StringCodec,
    decode_args,
    find_input_codec,
    register_input_codec,
)
from mlserver.types import InferenceRequest, RequestInput  # noqa: E402

from tests.support import mlserver_codec_cases  # noqa: E402

HERE = Path(__file__).parent
EXPECTED = json.loads((HERE / "mlserver_codec_expected.json").read_text())
MLSERVER_PYTHON = os.environ.get("INFERD_BENCH_MLSERVER_PYTHON")
OURS = mlserver_codec_cases.run_cases()


@pytest.mark.parametrize("case", sorted(mlserver_codec_cases.CASES))
def test_each_codec_call_gives_what_mlserver_1_7_1_gives(case: str) -> None:
    assert OURS[case] == EXPECTED[case]


@pytest.mark.mlserver
@pytest.mark.skipif(not MLSERVER_PYTHON, reason="INFERD_BENCH_MLSERVER_PYTHON is not set")
def test_the_recorded_results_are_those_of_the_live_mlserver() -> None:
    script = Path(mlserver_codec_cases.__file__)
    done = subprocess.run(
        [str(MLSERVER_PYTHON), str(script)], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == OURS


def test_the_alias_is_the_compat_package() -> None:
    import mlserver
    import mlserver.codecs

    import inferd.compat.mlserver.codecs

    assert mlserver.codecs is inferd.compat.mlserver.codecs
    assert mlserver.codecs.NumpyCodec is inferd.compat.mlserver.codecs.NumpyCodec
    assert mlserver.__name__ == "inferd.compat.mlserver"


def test_an_installed_mlserver_is_never_shadowed(tmp_path: Path) -> None:
    fake = tmp_path / "mlserver"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    code = (
        "from inferd.compat.importer import install_mlserver_alias\n"
        "assert install_mlserver_alias() is False\n"
        "import mlserver; assert mlserver.REAL\n"
    )
    pythonpath = f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run(
        [os.sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_a_registered_input_codec_is_found_by_its_content_type() -> None:
    @register_input_codec
    class Reversed(InputCodec):
        ContentType = "test-reversed"

        @classmethod
        def decode_input(cls, request_input: RequestInput) -> list[str]:
            return [item[::-1] for item in StringCodec.decode_input(request_input)]

    assert find_input_codec("test-reversed") is Reversed
    item = RequestInput(name="x", datatype="BYTES", shape=[1], data=["abc"])
    assert Reversed.decode_input(item) == ["cba"]


def test_decode_args_refuses_a_type_without_a_codec() -> None:
    with pytest.raises(CodecNotFound):

        @decode_args
        async def predict(self: object, x: complex) -> np.ndarray:
            return np.zeros(1)


def test_numpy_decode_of_inferd_data_is_a_view_of_it() -> None:
    flat = np.arange(6, dtype=np.float32)
    item = RequestInput.model_construct(
        name="x", datatype="FP32", shape=[2, 3], data=flat, parameters=None
    )
    decoded = NumpyCodec.decode_input(item)
    assert decoded.shape == (2, 3) and np.shares_memory(decoded, flat)


def test_pandas_columns_mlserver_cannot_encode_are_encoded() -> None:
    # MLServer 1.7.1 raises a KeyError on these dtypes (pandas' str, datetime, nullable).
    frame = pd.DataFrame(
        {
            "s": pd.array(["x", "y"], dtype="str"),
            "d": [dt.datetime(2021, 1, 2, 3), dt.datetime(2022, 5, 6)],
            "n": pd.array([1, None], dtype="Int64"),
        }
    )
    outputs = {out.name: out for out in PandasCodec.encode_response("m", frame).outputs}
    assert (outputs["s"].datatype, outputs["s"].data.root) == ("BYTES", [b"x", b"y"])
    assert outputs["s"].parameters.content_type == "str"
    assert outputs["d"].data.root == [b"2021-01-02T03:00:00", b"2022-05-06T00:00:00"]
    assert outputs["d"].parameters.content_type == "datetime"
    assert (outputs["n"].datatype, outputs["n"].data.root) == ("FP64", [1.0, None])


def test_pandas_decodes_datetime_columns() -> None:
    request = InferenceRequest(
        inputs=[
            {
                "name": "d",
                "datatype": "BYTES",
                "shape": [1],
                "data": ["2021-08-24T15:01:19"],
                "parameters": {"content_type": "datetime"},
            }
        ],
        parameters={"content_type": "pd"},
    )
    from mlserver.codecs import decode_inference_request

    frame = decode_inference_request(request)
    assert frame["d"].dtype.kind == "M"
    assert frame["d"][0] == pd.Timestamp("2021-08-24T15:01:19")


def test_construct_builds_what_model_construct_builds() -> None:
    from mlserver.types import Parameters

    from inferd.compat.construct import construct

    values = {"content_type": "np", "custom": 1}
    built, reference = construct(Parameters, values), Parameters.model_construct(**values)
    assert built.model_dump() == reference.model_dump() == values
    assert built.model_fields_set == {"content_type", "custom"}
    assert (built.headers, built.custom) == (None, 1)
    item = construct(RequestInput, {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]})
    assert item.model_dump() == {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}
