"""What the supervisor checks and makes before any protocol process starts."""

from __future__ import annotations

import socket
import stat

import pytest

from inferd.errors import ConfigurationError
from inferd.settings import ServerSettings
from inferd.supervisor.main import check_public_ports, private_folder
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
