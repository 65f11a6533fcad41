"""The gRPC server's services are served by generic handlers alone: no registered
methods, whose futures grpcio's asyncio server waits on for every call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from inferd.server.parts import ServerParts
from inferd.settings import ServerSettings


class RecordingServer:
    """What GrpcServer adds to its grpc.aio server."""

    def __init__(self, **options: Any) -> None:
        self.generic: list[grpc.GenericRpcHandler] = []
        self.registered: list[str] = []

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        self.registered.append(service)


class Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def test_every_service_is_served_by_generic_handlers_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recorded = RecordingServer()
    monkeypatch.setattr(grpc.aio, "server", lambda **options: recorded)
    ServerParts(ServerSettings(model_repository_root=str(tmp_path))).grpc_server()
    assert recorded.registered == []
    for method in (
        "/inference.GRPCInferenceService/ModelInfer",
        "/inference.GRPCInferenceService/ServerLive",
        "/grpc.health.v1.Health/Check",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    ):
        found = [h.service(Details(method)) for h in recorded.generic]
        assert any(handler is not None for handler in found), method
