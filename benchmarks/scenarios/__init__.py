"""The scenarios ``python -m benchmarks`` runs, by name."""

from __future__ import annotations

from .base import Case, Scenario, VerificationError
from .grpc import Grpc
from .metrics import Metrics
from .rest import Batching, Rest
from .sklearn_onnx import SklearnOnnx
from .streaming import Streaming
from .tls import Tls
from .workers import Workers

SCENARIOS: dict[str, type[Scenario]] = {
    scenario.name: scenario
    for scenario in (Rest, Grpc, Workers, Batching, Metrics, SklearnOnnx, Streaming, Tls)
}

__all__ = ["SCENARIOS", "Case", "Scenario", "VerificationError"]
