"""inferd: a fast inference server for the Open Inference Protocol (KServe V2)."""

from .errors import (
    DeadlineExceeded,
    InferdError,
    InvalidRequest,
    ModelError,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
)
from .model import Model, WorkerContext
from .settings import ModelParameters, ModelSettings, ServerSettings
from .types import (
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    ModelMetadata,
    RequestedOutput,
    Tensor,
)
from .version import __version__

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
