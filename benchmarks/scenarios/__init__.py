"""The scenarios ``python -m benchmarks`` runs, by name."""

from __future__ import annotations

from .base import Case, Scenario, VerificationError
from .cache import Cache
from .composition import Composition
from .fairness import Fairness
from .grpc import Grpc
from .grpc_floor import GrpcFloor
from .metrics import Metrics
from .mlmodel import MLModelIris
from .openai import OpenAIChat
from .overload import Overload
from .rest import Batching, Rest
from .shared_memory import SharedMemory
from .sklearn_onnx import SklearnOnnx
from .streaming import Streaming
from .tls import Tls
from .tracing import Tracing
from .workers import Workers

SCENARIOS: dict[str, type[Scenario]] = {
    scenario.name: scenario
    for scenario in (
        Rest,
        Grpc,
        GrpcFloor,
        Workers,
        Batching,
        Fairness,
        Overload,
        Metrics,
        SklearnOnnx,
        Streaming,
        Tls,
        Cache,
        SharedMemory,
        Tracing,
        MLModelIris,
        OpenAIChat,
        Composition,
    )
}

__all__ = ["SCENARIOS", "Case", "Scenario", "VerificationError"]
