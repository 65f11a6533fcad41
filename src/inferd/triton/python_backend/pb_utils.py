"""``triton_python_backend_utils``: what a Triton Python-backend ``model.py`` imports.

The runtime serves this module under that name (``import
triton_python_backend_utils as pb_utils``) before it imports a model; the names
and their behaviour are Triton's (its python_backend README).
"""

from __future__ import annotations

import logging
from typing import Any

from inferd.triton.python_backend.metrics import Metric, MetricFamily
from inferd.triton.python_backend.modelconfig import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from inferd.triton.python_backend.request import InferenceRequest
from inferd.triton.python_backend.sender import (
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    ResponseSender,
)
from inferd.triton.python_backend.tensor import (
    InferenceResponse,
    Tensor,
    TritonError,
    TritonModelException,
    triton_string_to_numpy,
)

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "InferenceRequest",
    "InferenceResponse",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "ResponseSender",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "triton_string_to_numpy",
    "using_decoupled_model_transaction_policy",
]


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input called ``name``, or None."""
    return _named(inference_request.inputs(), name)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output called ``name``, or None."""
    return _named(inference_response.output_tensors(), name)


def _named(tensors: list[Tensor], name: str) -> Tensor | None:
    for tensor in tensors:
        if tensor.name() == name:
            return tensor
    return None


class LogLevel:
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


_logger = logging.getLogger("inferd.triton.python_backend.model")


class Logger:
    """``pb_utils.Logger.log_info(...)``: into the server's log."""

    @staticmethod
    def log(message: Any, level: int = LogLevel.INFO) -> None:
        _logger.log(level, "%s", message)

    @staticmethod
    def log_info(message: Any) -> None:
        _logger.info("%s", message)

    @staticmethod
    def log_warn(message: Any) -> None:
        _logger.warning("%s", message)

    @staticmethod
    def log_error(message: Any) -> None:
        _logger.error("%s", message)

    @staticmethod
    def log_verbose(message: Any) -> None:
        _logger.debug("%s", message)
