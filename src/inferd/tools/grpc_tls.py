"""TLS for the tools' gRPC channels, and what ``--insecure`` means there.

gRPC (grpcio, as tritonclient and perf_analyzer use it) has no switch that turns
certificate verification off: a channel trusts the roots it is given and checks
the server's name against the certificate. So ``--insecure`` trusts whatever the
server shows: its certificate is fetched once (a TLS handshake that verifies
nothing, as REST's ``--insecure`` does on every connection), then given to gRPC
as the one root it trusts, and the channel expects a name that certificate holds.
That skips the chain and the name check; a certificate outside its validity
dates is still refused (gRPC checks them on the trusted certificate itself).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import grpc

_NAME_OVERRIDE = "grpc.ssl_target_name_override"
_SAN_KINDS = ("DNS", "IP Address")


@dataclass(frozen=True)
class GrpcSecurity:
    """Credentials and channel options of a TLS gRPC channel."""

    credentials: grpc.ChannelCredentials
    options: tuple[tuple[str, str], ...] = ()


def grpc_security(host: str, port: int, verify: bool, timeout_s: float = 10.0) -> GrpcSecurity:
    """How to open a TLS channel to ``host:port``: the system's roots, or (``verify``
    off) the server's own certificate, trusted as it is."""
    if verify:
        return GrpcSecurity(grpc.ssl_channel_credentials())
    pem, names = server_certificate(host, port, timeout_s)
    credentials = grpc.ssl_channel_credentials(root_certificates=pem.encode())
    if not names or _holds(names, host):
        return GrpcSecurity(credentials)
    # gRPC checks the name it connects to against the certificate: ask for one it holds.
    return GrpcSecurity(credentials, ((_NAME_OVERRIDE, _concrete(names[0])),))


def server_certificate(host: str, port: int, timeout_s: float) -> tuple[str, list[str]]:
    """The PEM certificate ``host:port`` shows, unverified, and the names it holds
    (subject alternative names, else its common name).

    Python's ssl decodes a certificate only once it verified it, so the names come
    from a second handshake that trusts exactly the certificate fetched first."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    der = _peer_certificate(unverified, host, port, timeout_s, binary=True)
    if not der:
        raise ConnectionError(f"{host}:{port} showed no TLS certificate")
    pem = ssl.DER_cert_to_PEM_cert(der)
    pinned = ssl.create_default_context(cadata=pem)
    pinned.check_hostname = False
    pinned.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a leaf is trusted without its CA
    decoded = _peer_certificate(pinned, host, port, timeout_s, binary=False) or {}
    names = [str(value) for kind, value in decoded.get("subjectAltName", ()) if kind in _SAN_KINDS]
    if not names:
        subject = decoded.get("subject", ())
        names = [str(value) for rdn in subject for key, value in rdn if key == "commonName"]
    return pem, names


def _peer_certificate(
    context: ssl.SSLContext, host: str, port: int, timeout_s: float, binary: bool
) -> Any:
    context.set_alpn_protocols(["h2"])  # as a gRPC client: some servers insist
    with (
        socket.create_connection((host, port), timeout=timeout_s) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        return tls.getpeercert(binary_form=binary)


def _holds(names: list[str], host: str) -> bool:
    """Whether ``host`` is one of ``names`` (a wildcard counts as not: the name is
    overridden with one that matches it, which is as good)."""
    if host.lower() in (name.lower() for name in names):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(_address(name) == address for name in names)


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _concrete(name: str) -> str:
    """A name that matches ``name``: a wildcard's ``*`` filled in."""
    return f"insecure.{name[2:]}" if name.startswith("*.") else name
