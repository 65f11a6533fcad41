"""inferd: a fast inference server for the Open Inference Protocol (KServe V2)."""

from inferd.errors import (
    DeadlineExceeded,
    InferdError,
    InvalidRequest,
    ModelError,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
)
from inferd.model import Model, WorkerContext
from inferd.settings import ModelParameters, ModelSettings, ServerSettings
from inferd.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    ModelMetadata,
    RequestedOutput,
    Tensor,
)
from inferd.version import __version__

__all__ = [
    "DeadlineExceeded",
    "InferdError",
    "InferenceRequest",
    "InferenceResponse",
    "InvalidRequest",
    "MetadataTensor",
    "Model",
    "ModelError",
    "ModelMetadata",
    "ModelNotFound",
    "ModelNotReady",
    "ModelParameters",
    "ModelSettings",
    "Overloaded",
    "RequestedOutput",
    "ServerSettings",
    "Tensor",
    "WorkerContext",
    "__version__",
]
