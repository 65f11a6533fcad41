"""Where this process's runtimes, and its worker processes' runtimes, call models.

Runtimes in this process call its dataplane directly (``model_calls.serve_calls``).
With worker processes, the dataplane is also served to them on a private unix
socket with the model host's edge (``host_edge.py``: ``LOAD (name, version)``,
``PREDICT``, ``STREAM`` run on this dataplane), its path in the environment the
workers inherit (``workers/calls_client.py`` connects to it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from inferd import model_calls
from inferd.server.host_edge import close_host, serve_host
from inferd.server.protocol_role import bind_unix
from inferd.serving.dataplane import DataPlane
from inferd.settings import ServerSettings
from inferd.workers.calls_client import SOCKET_VARIABLE


@contextlib.asynccontextmanager
async def model_calls_served(dataplane: DataPlane, settings: ServerSettings) -> AsyncIterator[None]:
    """Serve model calls while the server runs (enter it before the workers start)."""
    model_calls.serve_calls(dataplane)
    folder = None
    server = None
    try:
        if settings.parallel_workers > 0:
            folder = tempfile.mkdtemp(prefix="inferd-calls-")
            path = Path(folder) / "calls.sock"
            server = await serve_host(dataplane, bind_unix(path))
            os.environ[SOCKET_VARIABLE] = str(path)
        yield
    finally:
        model_calls.serve_calls(None)
        if server is not None:
            close_host(server)
            os.environ.pop(SOCKET_VARIABLE, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
