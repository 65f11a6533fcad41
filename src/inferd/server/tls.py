"""TLS and mutual TLS, with the certificate read again when its files change.

``ssl_certfile`` + ``ssl_keyfile`` serve REST and gRPC over TLS; ``ssl_ca_certs``
makes every client present a certificate signed by one of those CAs. When
cert-manager (or anyone) rewrites the files, new connections get the new
certificate; connections already open keep theirs. Nothing restarts.

- REST: uvicorn gets a :class:`ReloadingContext`, an SSLContext whose
  ``wrap_bio`` (called by asyncio and uvloop for each accepted connection) hands
  the connection to the context built from the current files.
- gRPC: ``grpc.dynamic_ssl_server_credentials``, whose fetcher grpc calls on each
  handshake; it answers a new configuration once the files changed.

Files that cannot be used at start-up stop the server with a ConfigurationError;
files that break later (a rotation half-written) are logged and the certificate
in use stays until they are whole again.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

import grpc

from inferd.errors import ConfigurationError
from inferd.server.filewatch import WatchedFiles
from inferd.settings import ServerSettings

logger = logging.getLogger(__name__)


class TlsFiles:
    """The certificate, key and (for mutual TLS) client CA files named by the settings."""

    def __init__(self, certfile: str, keyfile: str, ca_certs: str | None) -> None:
        self.certfile = certfile
        self.keyfile = keyfile
        self.ca_certs = ca_certs

    @classmethod
    def of(cls, settings: ServerSettings) -> TlsFiles | None:
        """The settings' TLS files; None when TLS is off."""
        if settings.ssl_certfile is None or settings.ssl_keyfile is None:
            return None
        return cls(settings.ssl_certfile, settings.ssl_keyfile, settings.ssl_ca_certs)

    @property
    def mutual(self) -> bool:
        return self.ca_certs is not None

    def watch(self) -> WatchedFiles:
        """A watch of these files (each user needs its own: a change is told once)."""
        paths = [self.certfile, self.keyfile]
        return WatchedFiles([*paths, self.ca_certs] if self.ca_certs else paths)

    def ssl_context(self) -> ssl.SSLContext:
        """A server context from the files as they are now; ConfigurationError if unusable."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
            if self.ca_certs is not None:
                context.load_verify_locations(cafile=self.ca_certs)
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as error:
            raise ConfigurationError(self._unusable(error)) from None
        return context

    def grpc_configuration(self) -> Any:
        """grpc's certificate configuration from the files as they are now."""
        self.ssl_context()  # the same checks: the key matches the certificate, CAs parse
        try:
            certificate, key = _read(self.certfile), _read(self.keyfile)
            ca = _read(self.ca_certs) if self.ca_certs is not None else None
        except OSError as error:
            raise ConfigurationError(self._unusable(error)) from None
        return grpc.ssl_server_certificate_configuration([(key, certificate)], ca)

    def _unusable(self, error: Exception) -> str:
        reason = getattr(error, "strerror", None) or getattr(error, "reason", None) or error
        files = f"ssl_certfile {self.certfile}, ssl_keyfile {self.keyfile}"
        if self.ca_certs is not None:
            files += f", ssl_ca_certs {self.ca_certs}"
        return (
            f"Cannot serve TLS with {files}: {reason}; they must be PEM files, the key "
            "that of the certificate"
        )


class ReloadingContext(ssl.SSLContext):
    """An SSLContext for asyncio's servers that uses the current certificate files for
    each new connection (read again at most once a second, when they changed)."""

    def __new__(cls, files: TlsFiles) -> ReloadingContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)

    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        self._watch = files.watch()
        self._current = files.ssl_context()

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        if self._watch.changed():
            self._reload()
        return self._current.wrap_bio(*args, **kwargs)

    def _reload(self) -> None:
        try:
            self._current = self._files.ssl_context()
        except ConfigurationError as error:
            logger.warning("%s; new REST connections keep the certificate read before", error)
        else:
            logger.info("REST: read the TLS certificate %s again", self._files.certfile)


def grpc_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Server credentials that take the files again, on the next handshake, once changed."""
    watch = files.watch()
    initial = files.grpc_configuration()

    def fetch() -> Any:
        if not watch.changed():
            return None  # grpc keeps the configuration it has
        try:
            configuration = files.grpc_configuration()
        except ConfigurationError as error:
            logger.warning("%s; new gRPC connections keep the certificate read before", error)
            return None
        logger.info("gRPC: read the TLS certificate %s again", files.certfile)
        return configuration

    return grpc.dynamic_ssl_server_credentials(
        initial, fetch, require_client_authentication=files.mutual
    )


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()
