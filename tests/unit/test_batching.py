"""Merging requests into a batch and splitting its answer (pure code)."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.dispatch.batching import batch_key, batch_rows, merge, split
from inferd.errors import ModelError
from inferd.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor


def request(rows: int, id: str, start: float = 0.0, **parameters: object) -> InferenceRequest:
    data = np.arange(start, start + rows * 3, dtype=np.float32).reshape(rows, 3)
    return InferenceRequest(inputs=[Tensor("x", data)], id=id, parameters=dict(parameters))


def doubled(batch: InferenceRequest) -> InferenceResponse:
    x = batch.input("x").data
    return InferenceResponse(
        outputs=[Tensor("y", x * 2), Tensor("n", np.arange(len(x)))],
        model_name="m",
        parameters={"p": 1},
    )


def test_rows_are_the_first_dimension_shared_by_every_input() -> None:
    assert batch_rows(request(4, "a")) == 4
    mixed = InferenceRequest([Tensor("a", np.zeros((2, 1))), Tensor("b", np.zeros((3, 1)))])
    assert batch_rows(mixed) is None
    assert batch_rows(InferenceRequest([Tensor("s", np.array(1.0))])) is None


def test_merge_then_split_gives_each_request_its_own_rows_and_id() -> None:
    requests = [request(1, "a"), request(10, "b", 100), request(3, "c", 1000)]
    batch = merge(requests)
    assert batch.input("x").data.shape == (14, 3)
    responses = split(doubled(batch), requests, [1, 10, 3])
    for req, res in zip(requests, responses, strict=True):
        assert res.id == req.id
        np.testing.assert_array_equal(res.output("y").data, req.input("x").data * 2)
        assert res.parameters == {"p": 1}
        assert res.model_name == "m"
    assert responses[0].parameters is not responses[1].parameters


def test_bytes_inputs_merge_and_split_exactly() -> None:
    def words(*items: bytes) -> InferenceRequest:
        return InferenceRequest([Tensor("t", np.array(items, dtype=object))], id=items[0].decode())

    requests = [words(b"a"), words(b"bb", b""), words(b"ccc")]
    batch = merge(requests)
    assert batch.input("t").data.tolist() == [b"a", b"bb", b"", b"ccc"]
    echoed = InferenceResponse([Tensor("t", batch.input("t").data)])
    parts = split(echoed, requests, [1, 2, 1])
    assert [p.output("t").data.tolist() for p in parts] == [[b"a"], [b"bb", b""], [b"ccc"]]


def test_a_lone_request_is_neither_copied_nor_rewrapped() -> None:
    only = request(2, "a")
    assert merge([only]) is only
    response = doubled(only)
    assert split(response, [only], [2]) == [response]


def test_wrong_row_count_from_the_model_fails_the_batch_clearly() -> None:
    requests = [request(1, "a"), request(2, "b")]
    wrong = InferenceResponse([Tensor("y", np.zeros((2, 3)))])
    with pytest.raises(ModelError, match="batch of 3 rows with 2 rows in output 'y'"):
        split(wrong, requests, [1, 2])
    scalar = InferenceResponse([Tensor("y", np.array(1.0))])
    with pytest.raises(ModelError, match="a scalar"):
        split(scalar, requests, [1, 2])


def test_requests_the_model_would_treat_differently_get_different_keys() -> None:
    base = batch_key(request(1, "a"))
    assert batch_key(request(5, "b", 9.0)) == base  # rows and values do not matter
    assert batch_key(request(1, "c", priority=1, timeout=5)) == base  # queue-only parameters
    assert batch_key(request(1, "c", binary_data_output=True)) == base  # wire-only parameter
    binary_y, json_y = request(1, "g"), request(1, "h")
    binary_y.outputs = [RequestedOutput("y", {"binary_data": True})]
    json_y.outputs = [RequestedOutput("y")]
    assert batch_key(binary_y) == batch_key(json_y)
    assert batch_key(request(1, "d", content_type="np")) != base
    assert batch_key(request(1, "e", extra={"k": [1, 2]})) != base
    other_dtype = InferenceRequest([Tensor("x", np.zeros((1, 3), dtype=np.float64))])
    other_shape = InferenceRequest([Tensor("x", np.zeros((1, 4), dtype=np.float32))])
    other_name = InferenceRequest([Tensor("z", np.zeros((1, 3), dtype=np.float32))])
    with_output = request(1, "f")
    with_output.outputs = [RequestedOutput("y")]
    for different in (other_dtype, other_shape, other_name, with_output):
        assert batch_key(different) != base
