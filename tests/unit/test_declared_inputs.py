"""serving/declared_inputs.py: which requests fit a model's declared inputs."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.custom_calls import HandlerCall, handler_request
from inferd.errors import InvalidRequest
from inferd.serving.declared_inputs import declared_inputs
from inferd.settings.model import MetadataTensorSettings
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


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([A], "Input 'b' is missing: model 'm' takes 'a', 'b'"),
        ([A, B, Tensor("c", np.zeros(1))], "Input 'c' is not an input of model 'm'"),
        ([Tensor("a", np.zeros((2, 3))), B], "Input 'a' is FP64, but model 'm' declares it FP32"),
        ([Tensor("a", np.zeros(3, np.float32)), B], "Input 'a' has shape [3], which does not"),
        ([A, Tensor("b", np.array([b"x", b"y"], dtype=object))], "Input 'b' has shape [2]"),
    ],
)
def test_what_does_not_fit_is_refused_by_name(inputs: list[Tensor], message: str) -> None:
    assert CHECK is not None
    with pytest.raises(InvalidRequest) as refused:
        CHECK.check(InferenceRequest(inputs))
    assert message in refused.value.message


def test_a_custom_handler_call_is_not_checked() -> None:
    assert CHECK is not None
    CHECK.check(handler_request(HandlerCall("h", b"{}", "", {})))
