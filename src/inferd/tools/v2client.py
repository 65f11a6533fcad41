"""A small V2 (Open Inference Protocol) client for the tools: REST and gRPC.

REST is plain HTTP/1.1 (:mod:`inferd.tools.leanhttp`) over one keep-alive asyncio
connection per worker: the request is encoded to bytes once (:func:`http_post`) and
written as is, so a worker costs little per request (what a load generator needs).
gRPC uses grpc.aio with bytes in and out, so a pre-serialized ModelInferRequest is
sent without re-encoding.
Both answer with a :class:`Reply`: the status in HTTP terms, and the body.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import grpc

from inferd.tools.grpc_tls import GrpcSecurity, grpc_security

# gRPC codes that mean "try again later", as HTTP's 503 does for REST.
RETRYABLE_GRPC = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
RETRYABLE_HTTP = {502, 503, 504}
_GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}
INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class Endpoint:
    """Where the server is: ``host:port`` (a scheme, if given, picks TLS)."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    verify: bool = True  # with TLS: check the server's certificate (False: --insecure)

    @classmethod
    def parse(cls, url: str, use_ssl: bool = False, insecure: bool = False) -> Endpoint:
        parts = urlsplit(url if "//" in url else f"//{url}")
        use_ssl = use_ssl or parts.scheme == "https"
        default_port = 443 if use_ssl else 80
        if not parts.hostname:
            raise ValueError(f"{url!r} is not a server address (expected host:port)")
        port = parts.port or default_port
        return cls(parts.hostname, port, _tls(use_ssl, insecure), verify=not insecure)

    def grpc_security(self) -> GrpcSecurity:
        """How a TLS gRPC channel to this endpoint trusts the server (grpc_tls.py)."""
        return grpc_security(self.host, self.port, self.verify)

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"


def _tls(use_ssl: bool, insecure: bool) -> ssl.SSLContext | None:
    if not use_ssl:
        return None
    context = ssl.create_default_context()
    if insecure:  # the user's explicit choice: self-signed test servers
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@dataclass(slots=True)
class Reply:
    """One answer: HTTP status (gRPC codes mapped to it; 0 = no answer) and body."""

    status: int
    body: bytes
    retry_after: float | None = None
    error: str = ""
    close: bool = False  # the server closes the connection after this answer

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error

    @property
    def retryable(self) -> bool:
        return self.status in RETRYABLE_HTTP or self.status == 0


def infer_path(model_name: str, model_version: str | None = None) -> str:
    name = quote(model_name, safe="")
    if model_version:
        return f"/v2/models/{name}/versions/{quote(model_version, safe='')}/infer"
    return f"/v2/models/{name}/infer"


def http_post(
    endpoint: Endpoint, path: str, body: bytes, headers: dict[str, str] | None = None
) -> bytes:
    """The bytes of an HTTP/1.1 POST of a JSON ``body`` (or a binary-extension body when
    headers carry Inference-Header-Content-Length)."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {endpoint.netloc}"]
    fields = {"Content-Type": "application/json", **(headers or {})}
    lines += [f"{name}: {value}" for name, value in fields.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class GrpcConnection:
    """A gRPC channel calling ModelInfer with serialized requests (bytes in, bytes out).

    With TLS, ``security`` says how it trusts the server (default: the endpoint's
    :meth:`Endpoint.grpc_security`; pass one made once to share it between channels)."""

    def __init__(
        self, endpoint: Endpoint, timeout_s: float, security: GrpcSecurity | None = None
    ) -> None:
        target = endpoint.netloc
        if endpoint.tls is None:
            self._channel = grpc.aio.insecure_channel(target)
        else:
            security = security or endpoint.grpc_security()
            self._channel = grpc.aio.secure_channel(
                target, security.credentials, options=security.options
            )
        self._call = self._channel.unary_unary(INFER_METHOD)
        self.timeout_s = timeout_s

    async def infer(self, message: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> Reply:
        try:
            body = await self._call(message, timeout=self.timeout_s, metadata=metadata or None)
        except grpc.aio.AioRpcError as error:
            status = _GRPC_TO_HTTP.get(error.code(), 500)
            return Reply(status, b"", error=f"{error.code().name}: {error.details()}")
        return Reply(200, body)

    async def close(self) -> None:
        await self._channel.close()


def header_pairs(lines: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``-H 'Name: value'`` options as a dict; a line without a colon is refused."""
    headers: dict[str, Any] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise ValueError(f"header {line!r} is not 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers
