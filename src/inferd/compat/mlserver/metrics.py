"""MLServer's ``mlserver.register`` / ``mlserver.log``: custom metrics, served by
inferd's :mod:`~inferd.custom_metrics` on the same Prometheus endpoint, labelled
``model_name`` / ``model_version`` as MLServer labels them."""

from __future__ import annotations

from inferd import custom_metrics


def register(name: str, description: str) -> None:
    """Declare a histogram (MLServer's only kind); declaring it again is fine."""
    custom_metrics.register(name, description, kind="histogram")


def log(**metrics: float) -> None:
    """Observe each ``name=value`` (a name not registered yet becomes a histogram)."""
    custom_metrics.log(**metrics)


__all__ = ["log", "register"]
