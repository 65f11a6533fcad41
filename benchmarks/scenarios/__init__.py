"""The scenarios ``python -m benchmarks`` runs, by name."""

from __future__ import annotations

from .base import Case, Scenario, VerificationError
from .fairness import Fairness
from .grpc import Grpc
from .metrics import Metrics
from .mlmodel import MLModelIris
from .overload import Overload
from .rest import Batching, Rest
from .sklearn_onnx import SklearnOnnx
from .streaming import Streaming
from .tls import Tls
from .workers import Workers

SCENARIOS: dict[str, type[Scenario]] = {
    scenario.name: scenario
    for scenario in (
        Rest,
        Grpc,
        Workers,
        Batching,
        Fairness,
        Overload,
        Metrics,
        SklearnOnnx,
        Streaming,
        Tls,
        MLModelIris,
    )
}

__all__ = ["SCENARIOS", "Case", "Scenario", "VerificationError"]
