"""Certificates made on the spot for the TLS tests and the TLS benchmark.

A throwaway certificate authority signs a server certificate (for ``localhost``
and 127.0.0.1) and client certificates, written as PEM files. Uses the
``cryptography`` package (the ``test`` extra).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    certfile: Path
    keyfile: Path

    def read(self) -> tuple[bytes, bytes]:
        """(certificate, key) as PEM bytes."""
        return self.certfile.read_bytes(), self.keyfile.read_bytes()


class Authority:
    """A certificate authority that signs server and client certificates."""

    def __init__(self, folder: Path, name: str = "inferd test CA") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._subject = subject
        self.certificate = (
            _builder(subject, subject, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.certfile = folder / f"{_slug(name)}.pem"
        self.certfile.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def server(self, name: str = "server", hosts: tuple[str, ...] = SERVER_NAMES) -> KeyPair:
        """A certificate for ``hosts`` (host names and IP addresses; by default
        ``localhost`` and 127.0.0.1)."""
        names = [_general_name(host) for host in hosts]
        return self._issue(name, ExtendedKeyUsageOID.SERVER_AUTH, names)

    def client(self, name: str = "client") -> KeyPair:
        return self._issue(name, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _issue(
        self, name: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName]
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = _builder(subject, self._subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(self.folder / f"{_slug(name)}.crt", self.folder / f"{_slug(name)}.key")
        pair.certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        pair.keyfile.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return pair


def serial_of(pem: bytes) -> int:
    """The serial number of a PEM certificate (tells two certificates apart)."""
    return x509.load_pem_x509_certificate(pem).serial_number


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)
