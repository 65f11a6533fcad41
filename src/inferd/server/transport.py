"""What each server's transport takes from the settings: TLS and the limits on clients.

app.py builds the REST and metrics servers (uvicorn) with :func:`rest_options` and
:func:`metrics_options`; server/grpc/servicer.py builds the gRPC server with :func:`grpc_options`
and :func:`grpc_port_credentials`. The defaults of the limits are the settings'
(settings/server.py); docs/security.md lists them.
"""

from __future__ import annotations

from typing import Any

import grpc

from inferd.server.rest.limits import limited_protocol, uvicorn_concurrency_limit
from inferd.server.tls import ReloadingContext, TlsFiles, grpc_credentials
from inferd.settings import ServerSettings


def rest_options(settings: ServerSettings) -> dict[str, Any]:
    """uvicorn options of the REST server: its limits, and TLS when configured."""
    options: dict[str, Any] = {
        "http": limited_protocol(settings.max_header_size, settings.max_connections),
        "limit_concurrency": uvicorn_concurrency_limit(settings.max_connections),
        # No "server: uvicorn" header: an answer names no library.
        "server_header": False,
    }
    return options | _uvicorn_tls(settings)


def metrics_options(settings: ServerSettings) -> dict[str, Any]:
    """uvicorn options of the metrics server: plain HTTP unless ``metrics_ssl``."""
    options: dict[str, Any] = {"server_header": False}
    return options | (_uvicorn_tls(settings) if settings.metrics_ssl else {})


def _uvicorn_tls(settings: ServerSettings) -> dict[str, Any]:
    files = TlsFiles.of(settings)
    if files is None:
        return {}
    # Built now, so unusable files stop the start-up before anything runs.
    context = ReloadingContext(files)
    return {"ssl_context_factory": lambda config, default: context}


def grpc_options(settings: ServerSettings) -> list[tuple[str, int]]:
    """grpc.aio server options: the limits on connections, streams and metadata."""
    return [
        ("grpc.max_allowed_incoming_connections", settings.max_connections),
        ("grpc.max_concurrent_streams", settings.grpc_max_concurrent_streams),
        # Both limits the same: grpc refuses metadata past the soft one only sometimes.
        ("grpc.max_metadata_size", settings.max_header_size),
        ("grpc.absolute_max_metadata_size", settings.max_header_size),
    ]


def grpc_port_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    """The gRPC port's TLS credentials; None for a plain port."""
    files = TlsFiles.of(settings)
    return grpc_credentials(files) if files is not None else None


def add_grpc_port(
    server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None
) -> int:
    """Listen on ``address``, over TLS with ``credentials``; the port, 0 if it failed."""
    if credentials is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, credentials)
