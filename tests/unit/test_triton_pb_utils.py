"""triton_python_backend_utils' objects, and how a batch reaches execute."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from inferd.dispatch.batching import merge
from inferd.errors import ConfigurationError, InvalidRequest, ModelError
from inferd.triton.ensemble import _check_graph
from inferd.triton.python_backend import pb_utils
from inferd.triton.python_backend.reshape import Reshapes
from inferd.triton.python_backend.runtime import _split, _stacked
from inferd.types import InferenceRequest, InferenceResponse, Tensor


def request(rows: int, start: int) -> InferenceRequest:
    data = np.arange(start, start + rows * 2, dtype=np.float32).reshape(rows, 2)
    return InferenceRequest([Tensor("X", data)], id=f"r{start}")


def test_a_merged_batch_is_cut_back_into_its_requests() -> None:
    parts = [request(1, 0), request(3, 10), request(2, 100)]
    merged = merge(parts)
    assert merged.batch_rows == (1, 3, 2)
    split = _split(merged)
    assert [piece.inputs[0].data.tolist() for piece in split] == [
        part.inputs[0].data.tolist() for part in parts
    ]
    assert all(np.shares_memory(piece.inputs[0].data, merged.inputs[0].data) for piece in split)
    assert merge([parts[0]]).batch_rows == ()  # one request is not a batch


def test_the_answers_of_a_batch_are_stacked_in_order() -> None:
    answers = [
        InferenceResponse([Tensor("Y", np.full((rows, 1), rows, dtype=np.int64))])
        for rows in (1, 3)
    ]
    stacked = _stacked(answers)
    assert stacked.outputs[0].data.ravel().tolist() == [1, 3, 3, 3]
    assert stacked.outputs[0].data.dtype == np.int64


def test_model_config_completes_and_refuses_contradictions() -> None:
    config = pb_utils.ModelConfig({"input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [2]}]})
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2]})  # the same: kept
    config.add_output({"name": "B", "data_type": "TYPE_INT32", "dims": [-1]})
    config.set_max_batch_size(4)
    config.set_dynamic_batching()
    assert config.as_dict()["output"] == [{"name": "B", "data_type": "TYPE_INT32", "dims": [-1]}]
    assert config.as_dict()["max_batch_size"] == 4 and config.as_dict()["dynamic_batching"] == {}
    with pytest.raises(pb_utils.TritonModelException, match="has dims"):
        config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})
    with pytest.raises(pb_utils.TritonModelException, match="'name', 'data_type' and 'dims'"):
        config.add_output({"name": "C"})
    with pytest.raises(pb_utils.TritonModelException, match="sets max_batch_size to 4"):
        config.set_max_batch_size(8)


def test_config_helpers() -> None:
    config = {
        "input": [{"name": "A", "data_type": "TYPE_STRING"}],
        "output": [{"name": "B", "data_type": "TYPE_BOOL"}],
        "model_transaction_policy": {"decoupled": True},
    }
    assert pb_utils.get_input_config_by_name(config, "A") == config["input"][0]
    assert pb_utils.get_output_config_by_name(config, "A") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config)
    assert not pb_utils.using_decoupled_model_transaction_policy({})
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool


def test_tensors_keep_their_array_and_travel_by_dlpack() -> None:
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    tensor = pb_utils.Tensor("T", array)
    assert tensor.name() == "T" and tensor.as_numpy() is array
    back = pb_utils.Tensor.from_dlpack("U", tensor.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), array)
    via_object = pb_utils.Tensor.from_dlpack("V", array)
    assert np.shares_memory(via_object.as_numpy(), array)
    strings = pb_utils.Tensor("S", np.array(["a", "bc"]))
    assert strings.as_numpy().tolist() == [b"a", b"bc"]


def test_responses_and_errors() -> None:
    error = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    response = pb_utils.InferenceResponse(error=error)
    assert response.has_error() and response.error().message() == "bad"
    assert response.error().code() == pb_utils.TritonError.INVALID_ARG
    with pytest.raises(pb_utils.TritonModelException, match="must be a list"):
        pb_utils.InferenceResponse(output_tensors="nope")  # type: ignore[arg-type]
    request_ = pb_utils.InferenceRequest(
        model_name="m", inputs=[pb_utils.Tensor("A", np.zeros(1))], requested_output_names=["B"]
    )
    assert pb_utils.get_input_tensor_by_name(request_, "A") is not None
    assert pb_utils.get_input_tensor_by_name(request_, "Z") is None
    with pytest.raises(pb_utils.TritonModelException, match="not BLS requests"):
        request_.get_response_sender()


def test_the_sender_refuses_anything_after_the_final_flag() -> None:
    async def scenario() -> list[tuple[object, bool]]:
        queue: asyncio.Queue[tuple[object, bool]] = asyncio.Queue()
        sender = pb_utils.ResponseSender(asyncio.get_running_loop(), queue)  # type: ignore[arg-type]
        response = pb_utils.InferenceResponse([])
        sender.send(response)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        with pytest.raises(pb_utils.TritonModelException, match="final flag has already"):
            sender.send(response)
        with pytest.raises(pb_utils.TritonModelException, match="needs the final flag"):
            pb_utils.ResponseSender(asyncio.get_running_loop(), queue).send()  # type: ignore[arg-type]
        await asyncio.sleep(0)
        return [queue.get_nowait() for _ in range(queue.qsize())]

    sent = asyncio.run(scenario())
    assert [final for _, final in sent] == [False, True]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"model_name": "a", "input_map": {"X": "NOPE"}, "output_map": {"Y": "OUT"}}], "'NOPE'"),
        ([{"model_name": "a", "input_map": {"X": "IN"}, "output_map": {"Y": "IN"}}], "already"),
        ([{"model_name": "a", "input_map": {"X": "IN"}, "output_map": {"Y": "T"}}], "'OUT'"),
    ],
)
def test_an_ensemble_graph_names_what_is_missing(steps: list, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _check_graph("e", steps, {"IN"}, ["OUT"])


def test_reshape_gives_the_model_its_shape_and_the_client_its_dims() -> None:
    config = {
        "max_batch_size": 4,
        "input": [{"name": "X", "dims": [6], "reshape": {"shape": [2, 3]}}],
        "output": [{"name": "Y", "dims": [6], "reshape": {"shape": [3, 2]}}],
    }
    reshapes = Reshapes(config)
    x = np.arange(12).reshape(2, 6)
    assert reshapes.input("X", x).shape == (2, 2, 3)
    assert reshapes.output("Y", np.zeros((2, 3, 2))).shape == (2, 6)
    assert reshapes.input("other", x) is x
    with pytest.raises(InvalidRequest, match=r"cannot take the shape \[2, 3\]"):
        reshapes.input("X", np.zeros((2, 5)))
    with pytest.raises(ModelError, match=r"cannot take its dims \[6\]"):
        reshapes.output("Y", np.zeros((2, 5)))
