"""TLS contexts: unusable files, and certificates read again when their files change."""

from __future__ import annotations

import contextlib
import shutil
import ssl
from pathlib import Path

import pytest

from inferd.errors import ConfigurationError
from inferd.server import filewatch
from inferd.server.tls import ReloadingContext, TlsFiles
from tests.support.certs import Authority, KeyPair, serial_of


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki"))


def installed(pair: KeyPair, folder: Path) -> TlsFiles:
    """``pair`` copied to the files a server is configured with."""
    folder.mkdir(exist_ok=True)
    shutil.copy(pair.certfile, folder / "tls.crt")
    shutil.copy(pair.keyfile, folder / "tls.key")
    return TlsFiles(str(folder / "tls.crt"), str(folder / "tls.key"), None)


def handshake_serial(server: ssl.SSLContext, ca: Path) -> int:
    """Shake hands in memory with ``server``; the serial of the certificate it showed."""
    client_context = ssl.create_default_context(cafile=str(ca))
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(to_client, from_client, server_hostname="localhost")
    served = server.wrap_bio(to_server, from_server, server_side=True)
    for _ in range(10):
        for side in (client, served):
            with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the other side
                side.do_handshake()
        to_server.write(from_client.read())
        to_client.write(from_server.read())
        der = client.getpeercert(binary_form=True) if client.version() else None
        if der:
            return serial_of(ssl.DER_cert_to_PEM_cert(der).encode())
    raise AssertionError("the handshake did not finish")


def test_a_key_that_is_not_the_certificates_is_refused(
    authority: Authority, tmp_path: Path
) -> None:
    one, other = authority.server("one"), authority.server("other")
    files = TlsFiles(str(one.certfile), str(other.keyfile), None)
    with pytest.raises(
        ConfigurationError, match=f"Cannot serve TLS with ssl_certfile {one.certfile}"
    ):
        files.ssl_context()
    missing = TlsFiles(str(tmp_path / "none.crt"), str(one.keyfile), str(authority.certfile))
    with pytest.raises(ConfigurationError, match="No such file"):
        ReloadingContext(missing)


def test_new_connections_get_the_certificate_on_disk(
    authority: Authority, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filewatch, "CHECK_INTERVAL", 0.0)
    first, second = authority.server("first"), authority.server("second")
    files = installed(first, tmp_path / "tls")
    context = ReloadingContext(files)
    assert handshake_serial(context, authority.certfile) == serial_of(first.read()[0])
    # Half-way through a rotation the key is new and the certificate old: keep serving.
    shutil.copy(second.keyfile, files.keyfile)
    assert handshake_serial(context, authority.certfile) == serial_of(first.read()[0])
    shutil.copy(second.certfile, files.certfile)
    assert handshake_serial(context, authority.certfile) == serial_of(second.read()[0])


def test_mutual_tls_requires_a_client_certificate(authority: Authority) -> None:
    pair = authority.server("mutual")
    context = TlsFiles(str(pair.certfile), str(pair.keyfile), str(authority.certfile))
    assert context.mutual
    assert context.ssl_context().verify_mode is ssl.CERT_REQUIRED
