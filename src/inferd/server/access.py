"""Who may call which API group: ``restricted_apis`` and ``model_repository_api``.

Each REST route (routes.API_ROUTES) and gRPC method (server/grpc/access.py) belongs to
one API group. :func:`api_guards` gives a guard for each group that is closed or
restricted, and none for an open group: routes of open groups are built without
any check, so an unrestricted server pays nothing per request.

A restricted group answers only requests whose header carries one of the
accepted values. The values are compared as SHA-256 digests with
``hmac.compare_digest``, against every accepted value, so the time taken says
nothing about how close a guess was nor which key matched. Several values may be
accepted at once: a key is rotated by adding the new one, moving the clients,
then removing the old one; a ``values_from_file`` is read again when it changes.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from inferd.errors import ConfigurationError, PermissionDenied
from inferd.server.errors import http_error
from inferd.server.filewatch import WatchedFiles
from inferd.server.routes import MODEL_REPOSITORY
from inferd.settings import ServerSettings
from inferd.settings.security import RestrictedApiSettings

logger = logging.getLogger(__name__)

REPOSITORY_API_OFF = (
    "The model repository API is turned off on this server (model_repository_api: false): "
    "it serves the models it loaded at start-up"
)


class AcceptedKeys:
    """The accepted values of one restriction, kept as digests."""

    def __init__(self, restriction: RestrictedApiSettings) -> None:
        self.restriction = restriction
        path = restriction.values_from_file
        self._watch = WatchedFiles([path]) if path is not None else None
        self._digests = self._read()  # ConfigurationError at start-up: no key, no server

    def accepts(self, value: bytes) -> bool:
        presented = _digest(value)
        accepted = False
        for digest in self._current():
            # No early exit: every accepted value is compared, whichever matches.
            accepted |= hmac.compare_digest(presented, digest)
        return accepted

    def _current(self) -> tuple[bytes, ...]:
        if self._watch is not None and self._watch.changed():
            try:
                self._digests = self._read()
            except ConfigurationError as error:
                logger.warning("%s; the keys read before stay accepted", error)
            else:
                logger.info("Read the keys of %s again", self.restriction.source)
        return self._digests

    def _read(self) -> tuple[bytes, ...]:
        try:
            values = self.restriction.read_values()
        except ValueError as error:
            groups = ", ".join(self.restriction.apis)
            raise ConfigurationError(
                f"restricted_apis ({groups}): {error}; it must hold the accepted values of "
                f"header {self.restriction.header!r}, comma-separated"
            ) from None
        return tuple(_digest(value.encode()) for value in values)


class ApiGuard:
    """What decides whether a request of one API group may go on."""

    def __init__(self, group: str) -> None:
        self.group = group

    def check_headers(self, headers: Mapping[bytes, bytes]) -> None:
        """PermissionDenied unless ASGI ``headers`` (names in lowercase) let it through."""
        raise NotImplementedError

    def check_metadata(self, metadata: Iterable[tuple[str, Any]] | None) -> None:
        """PermissionDenied unless gRPC invocation metadata lets it through."""
        raise NotImplementedError


class KeyGuard(ApiGuard):
    """Lets through the requests that carry an accepted key in ``header``."""

    def __init__(self, group: str, header: str, keys: AcceptedKeys) -> None:
        super().__init__(group)
        self.header = header
        self._header_bytes = header.encode()
        self._keys = keys

    def check_headers(self, headers: Mapping[bytes, bytes]) -> None:
        self._check(headers.get(self._header_bytes))

    def accepts(self, value: bytes) -> bool:
        return self._keys.accepts(value)

    def check_metadata(self, metadata: Iterable[tuple[str, Any]] | None) -> None:
        value = None
        for key, found in metadata or ():
            if key == self.header:
                value = found.encode() if isinstance(found, str) else found
        self._check(value)

    def _check(self, value: bytes | None) -> None:
        if value is None:
            raise PermissionDenied(
                f"The {self.group} API is restricted on this server: send the header "
                f"{self.header!r} with an accepted value"
            )
        if not self._keys.accepts(value):
            raise PermissionDenied(
                f"The {self.group} API is restricted on this server: the value of header "
                f"{self.header!r} is not accepted"
            )


class ClosedApi(ApiGuard):
    """An API group that is turned off: every request is refused."""

    def __init__(self, group: str, message: str) -> None:
        super().__init__(group)
        self._message = message

    def check_headers(self, headers: Mapping[bytes, bytes]) -> None:
        raise PermissionDenied(self._message)

    def check_metadata(self, metadata: Iterable[tuple[str, Any]] | None) -> None:
        raise PermissionDenied(self._message)


def api_guards(settings: ServerSettings) -> dict[str, ApiGuard]:
    """A guard for each API group that is restricted or off; open groups have none.

    ConfigurationError when the accepted values of a restriction cannot be read."""
    guards: dict[str, ApiGuard] = {}
    for restriction in settings.restricted_apis:
        keys = AcceptedKeys(restriction)
        for group in restriction.apis:
            guards[group] = KeyGuard(group, restriction.header, keys)
    if not settings.model_repository_api:
        guards[MODEL_REPOSITORY] = ClosedApi(MODEL_REPOSITORY, REPOSITORY_API_OFF)
    return guards


def check_bearer(guard: ApiGuard | None, headers: Mapping[bytes, bytes]) -> None:
    """As ``guard.check_headers``, also accepting the key as ``Authorization: Bearer
    <key>``: how OpenAI's clients send it (the OpenAI-compatible routes)."""
    if guard is None:
        return
    if isinstance(guard, KeyGuard):
        value = headers.get(b"authorization", b"")
        scheme, _, key = value.partition(b" ")
        if scheme.lower() == b"bearer" and key.strip() and guard.accepts(key.strip()):
            return
    guard.check_headers(headers)


class GuardedRoute:
    """ASGI middleware of a Starlette route whose API group has a guard."""

    def __init__(self, app: Any, guard: ApiGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            self.guard.check_headers(dict(scope["headers"]))
        except PermissionDenied as error:
            status, body, headers = http_error(error, self.guard.group)
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()
