"""A small V2 (Open Inference Protocol) client for the tools: REST and gRPC.

REST is plain HTTP/1.1 over one keep-alive asyncio connection per worker: the
request is encoded to bytes once and written as is, so a worker costs little
per request (what a load generator needs). gRPC uses grpc.aio with bytes in and
out, so a pre-serialized ModelInferRequest is sent without re-encoding.
Both answer with a :class:`Reply`: the status in HTTP terms, and the body.
"""

from __future__ import annotations

import asyncio
import contextlib
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

    @property
    def ok(self) -> bool:
        return self.status == 200

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


class HttpConnection:
    """One keep-alive HTTP/1.1 connection, one exchange at a time; reconnects when the
    server closed it."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def exchange(self, request: bytes) -> Reply:
        try:
            # asyncio.timeout, not wait_for: no task per request (the load generator's cost)
            async with asyncio.timeout(self.timeout_s):
                return await self._exchange(request)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as error:
            await self.close()
            return Reply(0, b"", error=f"{type(error).__name__}: {error}".rstrip(": "))

    async def _exchange(self, request: bytes) -> Reply:
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(
                self.endpoint.host, self.endpoint.port, ssl=self.endpoint.tls
            )
        assert self._reader is not None
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status, headers = parse_head(head)
        if "content-length" not in headers:
            raise ValueError("the server answered without a Content-Length")
        body = await self._reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Reply(status, body, _seconds(headers.get("retry-after")))

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """(status, lower-cased headers) of a response head ending in a blank line."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return status, headers


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:  # an HTTP date: no wait we can compute cheaply; use the back-off
        return None


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
