"""What the supervisor checks and makes before any protocol process starts."""

from __future__ import annotations

import signal
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import ConfigurationError
from inferd.server.protocol_role import bind_unix
from inferd.settings import ServerSettings
from inferd.supervisor.children import Child, environment_of_children
from inferd.supervisor.fanout import Answer, send
from inferd.supervisor.main import check_public_ports, exit_status, private_folder
from inferd.supervisor.paths import PrivatePaths
from inferd.supervisor.served import Service, serve_service, stop_services
from tests.support.polling import wait_for_async
from tests.support.serverproc import free_ports


def settings(http_port: int, grpc_port: int) -> ServerSettings:
    return ServerSettings(host="127.0.0.1", http_port=http_port, grpc_port=grpc_port)


def test_free_ports_pass_and_stay_free() -> None:
    http_port, grpc_port = free_ports(2)
    check_public_ports(settings(http_port, grpc_port))
    with socket.create_server(("127.0.0.1", http_port)):  # nothing kept them
        pass


def test_a_taken_port_says_which_setting_to_change() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=rf"gRPC on 127\.0\.0\.1:{port}.*grpc_port"):
            check_public_ports(settings(free_ports(1)[0], port))


def test_any_free_port_cannot_be_shared() -> None:
    with pytest.raises(ConfigurationError, match=r"http_port is 0.*protocol_processes: 1"):
        check_public_ports(settings(0, free_ports(1)[0]))


def test_the_private_folder_is_the_users_alone_and_removed_at_the_end() -> None:
    with private_folder() as paths:
        folder = paths.folder
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        paths.rest(0).write_text("a socket's file")
    assert not folder.exists()


@pytest.mark.anyio
async def test_a_service_is_served_on_its_socket_until_stopped(tmp_path: Path) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"coordinated"})

    path = tmp_path / "coordinator.sock"
    # Its options reach uvicorn (the metrics port's TLS goes this way).
    options = {"server_header": True}
    running = serve_service(Service("test service", app, bind_unix(path), options))
    answer = await wait_for_async(
        lambda: _answered(path), "the service to answer", timeout=10, interval=0.02
    )
    assert (answer.status, answer.body) == (200, b"coordinated")
    assert answer.headers["server"] == "uvicorn"
    await stop_services([running])
    assert running[1].done()


async def _answered(path: Path) -> Answer | None:
    answer = await send(path, "GET", "/")
    return answer if answer.status else None


def stopped_child(tmp_path: Path, index: int, returncode: int | None) -> Child:
    paths = PrivatePaths(tmp_path)
    child = Child(index, ["true"], environment_of_children(paths), paths)
    child.stopped_with = returncode
    return child


@pytest.mark.parametrize(
    ("returncodes", "status"),
    [
        ([0, 0], 0),
        ([0, None], 0),  # one was between restarts: nothing ran
        ([0, -signal.SIGTERM], 0),  # one still starting: its handler was not set yet
        ([0, 1], 1),  # cut at its deadline
        ([-signal.SIGKILL, 0], 1),  # killed past the grace
    ],
)
def test_the_exit_status_says_whether_every_process_drained(
    tmp_path: Path, returncodes: list[int | None], status: int
) -> None:
    children = [stopped_child(tmp_path, i, code) for i, code in enumerate(returncodes)]
    assert exit_status(children) == status
