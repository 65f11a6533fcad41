"""TLS and mutual TLS end to end, with certificates made for the test.

tritonclient talks to REST and gRPC with its ``ssl=True`` options; under mutual
TLS a client without a certificate is refused; a certificate swapped on disk is
served to new connections without a restart; the metrics port stays plain HTTP
unless ``metrics_ssl`` is set.
"""

from __future__ import annotations

import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from geventhttpclient.response import HTTPConnectionClosed
from tritonclient.utils import InferenceServerException

from tests.support.certs import Authority, KeyPair, serial_of
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .across_processes import BOTH_WAYS

H2 = ["h2"]  # what a gRPC client asks for in the TLS handshake


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def client_pair(authority: Authority) -> KeyPair:
    return authority.client()


def start_tls(
    folder: Path, server_pair: KeyPair, ca: Path, client: KeyPair | None = None, **settings: Any
) -> ServerProcess:
    """A TLS server on a repository with the echo model, polled until ready over HTTPS
    (trusting ``ca``; with ``client``'s certificate, for mutual TLS)."""
    add_custom_model(folder, "echo", "Echo")
    tls = {"ssl_certfile": str(server_pair.certfile), "ssl_keyfile": str(server_pair.keyfile)}
    process = start_server(folder, {**tls, **settings}, wait=None)
    try:
        with httpx.Client(verify=ssl_context(ca, client), timeout=5) as http:
            url = f"https://localhost:{process.http_port}/v2/health/ready"
            wait_for(lambda: _ready(process, http, url), "the TLS server to be ready", 60)
    except BaseException:
        process.stop()
        raise
    return process


def _ready(process: ServerProcess, http: httpx.Client, url: str) -> bool:
    if process.process.poll() is not None:
        raise RuntimeError(f"the server exited:\n{process.log()}")
    try:
        return http.get(url).status_code == 200
    except httpx.TransportError:
        return False


def ssl_context(ca: str | Path, client: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(client.certfile, client.keyfile)
    return context


def served_serial(port: int, ca: Path, client: KeyPair | None = None, alpn: Any = None) -> int:
    """The serial number of the certificate a new connection to ``port`` is shown."""
    context = ssl_context(ca, client)
    if alpn:
        context.set_alpn_protocols(alpn)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        context.wrap_socket(sock, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return serial_of(ssl.DER_cert_to_PEM_cert(der).encode())


def http_client(
    process: ServerProcess, ca: Path, client: KeyPair | None = None
) -> triton_http.InferenceServerClient:
    options = {"ca_certs": str(ca)}
    if client is not None:
        options |= {"certfile": str(client.certfile), "keyfile": str(client.keyfile)}
    return triton_http.InferenceServerClient(
        f"localhost:{process.http_port}", ssl=True, ssl_options=options
    )


def grpc_client(
    process: ServerProcess, ca: Path, client: KeyPair | None = None
) -> triton_grpc.InferenceServerClient:
    files = {}
    if client is not None:
        files = {"private_key": str(client.keyfile), "certificate_chain": str(client.certfile)}
    return triton_grpc.InferenceServerClient(
        f"localhost:{process.grpc_port}", ssl=True, root_certificates=str(ca), **files
    )


def echo(client: Any, module: Any) -> list[int]:
    tensor = module.InferInput("x", [1], "INT32")
    tensor.set_data_from_numpy(np.array([7], dtype=np.int32))
    return list(client.infer("echo", [tensor]).as_numpy("x").tolist())


# ---- TLS ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, authority: Authority
) -> Iterator[ServerProcess]:
    process = start_tls(
        tmp_path_factory.mktemp("tls"), authority.server("tls-server"), authority.certfile
    )
    yield process
    process.stop()


def test_tritonclient_over_tls(tls_server: ServerProcess, authority: Authority) -> None:
    client = http_client(tls_server, authority.certfile)
    try:
        assert client.is_server_ready()
        assert echo(client, triton_http) == [7]
    finally:
        client.close()
    with grpc_client(tls_server, authority.certfile) as client:
        assert client.is_server_ready()
        assert echo(client, triton_grpc) == [7]


def test_plain_clients_are_not_answered_and_metrics_stay_plain(
    tls_server: ServerProcess,
) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{tls_server.http_port}/v2/health/ready", timeout=5)
    with (
        grpc.insecure_channel(tls_server.grpc_address) as channel,
        pytest.raises(grpc.FutureTimeoutError),
    ):
        grpc.channel_ready_future(channel).result(timeout=2)
    metrics = httpx.get(f"http://127.0.0.1:{tls_server.metrics_port}/metrics", timeout=5)
    assert metrics.status_code == 200


# ---- mutual TLS -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mtls_server(
    tmp_path_factory: pytest.TempPathFactory, authority: Authority, client_pair: KeyPair
) -> Iterator[ServerProcess]:
    process = start_tls(
        tmp_path_factory.mktemp("mtls"),
        authority.server("mtls-server"),
        authority.certfile,
        client_pair,
        ssl_ca_certs=str(authority.certfile),
    )
    yield process
    process.stop()


def test_mutual_tls_serves_clients_with_a_certificate(
    mtls_server: ServerProcess, authority: Authority, client_pair: KeyPair
) -> None:
    client = http_client(mtls_server, authority.certfile, client_pair)
    try:
        assert echo(client, triton_http) == [7]
    finally:
        client.close()
    with grpc_client(mtls_server, authority.certfile, client_pair) as client:
        assert echo(client, triton_grpc) == [7]


def test_mutual_tls_refuses_clients_without_a_certificate(
    mtls_server: ServerProcess, authority: Authority, tmp_path: Path
) -> None:
    with (
        httpx.Client(verify=ssl_context(authority.certfile), timeout=5) as http,
        pytest.raises(httpx.TransportError),
    ):
        http.get(f"https://localhost:{mtls_server.http_port}/v2/health/ready")
    client = http_client(mtls_server, authority.certfile)
    try:
        # TLS 1.3: the handshake ends before the server checks; the refusal closes the
        # connection when the client reads its answer.
        with pytest.raises((ssl.SSLError, OSError, HTTPConnectionClosed)):
            client.is_server_live()
    finally:
        client.close()
    with (
        grpc_client(mtls_server, authority.certfile) as client,
        pytest.raises(InferenceServerException, match="UNAVAILABLE"),
    ):
        client.is_server_live(client_timeout=5)
    # A certificate from another authority is no better.
    stranger = Authority(tmp_path / "other-ca", "another CA").client("stranger")
    with (
        grpc_client(mtls_server, authority.certfile, stranger) as client,
        pytest.raises(InferenceServerException, match="UNAVAILABLE"),
    ):
        client.is_server_live(client_timeout=5)


# ---- rotation -----------------------------------------------------------------------------


@pytest.mark.parametrize("processes", BOTH_WAYS)
def test_a_certificate_swapped_on_disk_is_served_to_new_connections(
    tmp_path: Path, authority: Authority, processes: dict[str, Any]
) -> None:
    first, second = authority.server("first"), authority.server("second")
    live = KeyPair(tmp_path / "tls" / "tls.crt", tmp_path / "tls" / "tls.key")
    live.certfile.parent.mkdir()
    for source, target in ((first.certfile, live.certfile), (first.keyfile, live.keyfile)):
        shutil.copy(source, target)
    process = start_tls(
        tmp_path / "repository", live, authority.certfile, metrics_ssl=True, **processes
    )
    try:
        first_serial, second_serial = serial_of(first.read()[0]), serial_of(second.read()[0])
        ports = {"REST": (process.http_port, None), "gRPC": (process.grpc_port, H2)}
        ports["metrics"] = (process.metrics_port, None)
        for port, alpn in ports.values():
            assert served_serial(port, authority.certfile, alpn=alpn) == first_serial
        # As cert-manager does: the files are rewritten in place while the server runs.
        shutil.copy(second.keyfile, live.keyfile)
        shutil.copy(second.certfile, live.certfile)
        for what, (port, alpn) in ports.items():
            wait_for(
                lambda port=port, alpn=alpn: (
                    served_serial(port, authority.certfile, alpn=alpn) == second_serial
                ),
                f"{what} to serve the new certificate",
                15,
            )
        with grpc_client(process, authority.certfile) as client:
            assert echo(client, triton_grpc) == [7]
        client = http_client(process, authority.certfile)
        try:
            assert echo(client, triton_http) == [7]
        finally:
            client.close()
    finally:
        process.stop()


@pytest.mark.parametrize("processes", BOTH_WAYS)
def test_unusable_certificate_files_stop_the_start(
    tmp_path: Path, authority: Authority, processes: dict[str, Any]
) -> None:
    pair = authority.server("mismatched")
    other = authority.server("other")
    settings = {"ssl_certfile": str(pair.certfile), "ssl_keyfile": str(other.keyfile)}
    settings |= processes
    process = start_server(tmp_path, settings, wait=None)
    try:
        wait_for(lambda: process.process.poll() is not None, "the server to exit", 60)
        assert process.process.returncode != 0
        assert "Cannot serve TLS with ssl_certfile" in process.log()
    finally:
        process.stop()
