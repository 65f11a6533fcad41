"""With tracing off, a server never imports OpenTelemetry: its requests pay nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

BUILD_A_SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from inferd.server.app import InferenceServer
    from inferd.settings import ServerSettings

    async def build() -> None:
        server = InferenceServer(ServerSettings(model_repository_root=sys.argv[1]))
        server.rest_app()
        server.grpc_server()
        assert server.tracing is None

    asyncio.run(build())
    print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
    """
)


def run_build(tmp_path: Path, **env: str) -> str:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("OTEL_")
    } | env
    done = subprocess.run(
        [sys.executable, "-c", BUILD_A_SERVER, str(tmp_path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_server_without_tracing_imports_no_opentelemetry(tmp_path: Path) -> None:
    assert run_build(tmp_path) == "[]"


def test_otel_sdk_disabled_keeps_tracing_off(tmp_path: Path) -> None:
    imported = run_build(
        tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:1", OTEL_SDK_DISABLED="true"
    )
    assert imported == "[]"
