"""serving/declared_inputs.py: which requests fit a model's declared inputs."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.custom_calls import HandlerCall, handler_request
from inferd.errors import InvalidRequest
from inferd.serving.declared_inputs import declared_inputs, enforced_inputs
from inferd.settings.model import MetadataTensorSettings, ModelSettings
from inferd.types import InferenceRequest, Tensor

DECLARED = [
    MetadataTensorSettings(name="a", datatype="FP32", shape=[-1, 3]),
    MetadataTensorSettings(name="b", datatype="BYTES", shape=[1]),
]
CHECK = declared_inputs("m", DECLARED)
A = Tensor("a", np.zeros((2, 3), np.float32))
B = Tensor("b", np.array([b"x"], dtype=object))


def test_nothing_declared_checks_nothing() -> None:
    assert declared_inputs("m", []) is None


def test_fitting_requests_in_any_order_pass() -> None:
    assert CHECK is not None
    CHECK.check(InferenceRequest([B, A]))
    CHECK.check(InferenceRequest([Tensor("a", np.zeros((0, 3), np.float32)), B]))


COUNT = "expected 2 inputs but got {} inputs for model 'm'. Got input(s) "


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([A], COUNT.format(1) + "['a'], but missing required input(s) ['b']. Please provide"),
        ([], COUNT.format(0) + "[], but missing required input(s) ['a','b']"),
        ([A, B, Tensor("c", np.zeros(1))], "Not inputs of the model: ['c']"),
        ([A, Tensor("c", np.zeros(1))], "unexpected inference input 'c' for model 'm'"),
        (
            [Tensor("a", np.zeros((2, 3))), B],
            "input 'a' data-type is 'FP64', but model 'm' expects",
        ),
        (
            [Tensor("a", np.zeros(3, np.float32)), B],
            "input 'a' for model 'm'. Expected [-1,3], got [3]",
        ),
        ([A, Tensor("b", np.array([b"x", b"y"], dtype=object))], "Expected [1], got [2]"),
    ],
)
def test_what_does_not_fit_is_refused_by_name(inputs: list[Tensor], message: str) -> None:
    assert CHECK is not None
    with pytest.raises(InvalidRequest) as refused:
        CHECK.check(InferenceRequest(inputs))
    assert message in refused.value.message


def test_optional_inputs_may_be_left_out_but_not_in_place_of_required_ones() -> None:
    check = declared_inputs("m", DECLARED, optional={"b"})
    assert check is not None
    check.check(InferenceRequest([A]))
    check.check(InferenceRequest([A, B]))
    with pytest.raises(InvalidRequest) as refused:
        check.check(InferenceRequest([B]))
    assert refused.value.message.startswith(
        "expected number of inputs between 1 and 2 but got 1 inputs for model 'm'. Got "
        "input(s) ['b'], but missing required input(s) ['a']. Please provide all required"
    )


def test_only_a_triton_folders_inputs_are_enforced() -> None:
    tensors = [t.model_dump() for t in DECLARED]
    settings = ModelSettings(name="m", implementation="x.Y", inputs=tensors)
    assert enforced_inputs(settings) is None, "model-settings.json: metadata, as MLServer"
    config = {"input": [{"name": "a"}, {"name": "b", "optional": True}]}
    extra = {"extra": {"triton_config": config}}
    triton = ModelSettings(name="m", implementation="x.Y", inputs=tensors, parameters=extra)
    check = enforced_inputs(triton)
    assert check is not None
    check.check(InferenceRequest([A]))


def test_a_custom_handler_call_is_not_checked() -> None:
    assert CHECK is not None
    CHECK.check(handler_request(HandlerCall("h", b"{}", "", {})))
