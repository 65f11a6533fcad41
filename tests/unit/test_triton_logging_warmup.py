"""Triton's logging extension (log level at run time) and warmup requests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest
from pydantic import ValidationError

from inferd.errors import InvalidRequest
from inferd.settings.warmup import WarmupSettings
from inferd.triton.logsettings import SILENT, log_settings, update_log_settings
from inferd.workers.warmup import warmup_request


@pytest.fixture(autouse=True)
def root_level() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    yield
    root.setLevel(level)


def test_the_settings_read_the_root_level() -> None:
    assert log_settings() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }


@pytest.mark.parametrize(
    ("changes", "level"),
    [
        ({"log_verbose_level": 1}, logging.DEBUG),
        ({"log_info": False}, logging.WARNING),
        ({"log_info": False, "log_warning": False}, logging.ERROR),
        ({"log_info": False, "log_warning": False, "log_error": False}, SILENT),
        ({"log_format": "default", "log_file": ""}, logging.INFO),
    ],
)
def test_changes_set_the_level(changes: dict[str, object], level: int) -> None:
    settings = update_log_settings(changes)
    assert logging.getLogger().level == level
    for key, value in changes.items():
        assert settings[key] == value


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"log_file": "/tmp/x.log"}, "may not choose a file"),
        ({"log_format": "ISO8601"}, "'log_format' 'ISO8601' is not supported"),
        ({"log_info": "yes"}, "must be true or false"),
        ({"log_verbose_level": -1}, "whole number >= 0"),
        ({"log_colour": True}, "Unknown log setting 'log_colour'"),
    ],
)
def test_refused_changes_change_nothing(changes: dict[str, object], why: str) -> None:
    with pytest.raises(InvalidRequest, match=why):
        update_log_settings({"log_verbose_level": 1, **changes})
    assert logging.getLogger().level == logging.INFO


def warmup(**values: object) -> WarmupSettings:
    return WarmupSettings.model_validate(values)


def test_warmup_requests_have_the_shapes_and_data_asked_for() -> None:
    spec = warmup(
        name="w",
        batch_size=3,
        inputs={
            "zeros": {"data_type": "TYPE_FP32", "dims": [2], "zero_data": True},
            "random": {"data_type": "INT8", "dims": [2], "random_data": True},
            "given": {"data_type": "TYPE_STRING", "dims": [1], "input_data": ["a", "b", "c"]},
            "text": {"data_type": "BYTES", "dims": [2], "random_data": True},
        },
    )
    batched = {tensor.name: tensor.data for tensor in warmup_request(spec, batches=True).inputs}
    assert batched["zeros"].shape == (3, 2) and not batched["zeros"].any()
    assert batched["random"].dtype == np.int8 and batched["random"].shape == (3, 2)
    assert batched["given"].tolist() == [[b"a"], [b"b"], [b"c"]]
    assert all(item.isdigit() for item in batched["text"].ravel())
    alone = warmup_request(
        warmup(inputs={"x": {"data_type": "BOOL", "dims": [4], "zero_data": True}}), batches=False
    )
    assert alone.inputs[0].data.shape == (4,) and alone.id == "warmup"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"data_type": "FP32", "dims": [2]}, "exactly one of"),
        (
            {"data_type": "FP32", "dims": [2], "zero_data": True, "random_data": True},
            "exactly one of",
        ),
        ({"data_type": "FP32", "dims": [-1], "zero_data": True}, "no -1"),
        ({"data_type": "TYPE_COMPLEX", "dims": [1], "zero_data": True}, "unknown data_type"),
    ],
)
def test_warmup_inputs_are_checked_with_the_settings(spec: dict[str, object], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        warmup(inputs={"x": spec})
