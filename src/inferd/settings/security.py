"""Who may use which API: restricted API groups (``restricted_apis``).

Every REST route and gRPC method belongs to one API group (the same groups as
Triton's ``--http-restricted-api``). A restriction names groups, a request
header and where the accepted values are kept: an environment variable or a
file, never settings.json itself, so the secret stays in a Kubernetes Secret.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

ApiGroup = Literal[
    "health",
    "metadata",
    "inference",
    "statistics",
    "model_repository",
    "shared_memory",
    "logging",
    "model_config",
    "trace",
]
API_GROUPS: tuple[str, ...] = get_args(ApiGroup)
# An HTTP header name (RFC 9110 token) that gRPC also accepts as a metadata key:
# lowercase letters, digits and - _ . (uppercase is lowered); not a pseudo-header.
_HEADER_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
# Headers the servers read themselves: a key in one of them would be lost or leak.
_RESERVED_HEADERS = frozenset(
    ("content-length", "content-type", "content-encoding", "host", "te", "grpc-timeout")
)


class RestrictedApiSettings(BaseModel):
    """One restriction: these API groups answer only requests that carry ``header``
    with one of the accepted values (else REST 403, gRPC PERMISSION_DENIED)."""

    model_config = ConfigDict(extra="forbid")

    apis: list[ApiGroup]
    """The API groups restricted: ``health``, ``metadata``, ``inference``, ``statistics``,
    ``model_repository``, ``shared_memory``, ``logging``, ``model_config``, ``trace`` (Triton's
    spelling with ``-`` is accepted too)."""

    header: str
    """The request header (gRPC: metadata key) that must carry an accepted value."""

    values_from_env: str | None = None
    """An environment variable holding the accepted values, comma-separated. Read once at
    start-up: list the old and the new key while rolling a rotation out."""

    values_from_file: str | None = None
    """A file holding the accepted values, comma- or newline-separated (a mounted
    Kubernetes Secret). Read again when it changes, so keys rotate without a restart."""

    @field_validator("apis", mode="before")
    @classmethod
    def _triton_spelling(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [item.replace("-", "_") if isinstance(item, str) else item for item in value]
        return value

    @field_validator("apis")
    @classmethod
    def _some_api(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(f"name at least one API group of {', '.join(API_GROUPS)}")
        return value

    @field_validator("header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        name = value.strip().lower()
        if not _HEADER_NAME.fullmatch(name) or name.startswith("grpc-"):
            raise ValueError(
                "must be a header name of letters, digits, '-', '_' or '.' (not grpc-*), "
                "such as 'admin-key'"
            )
        if name in _RESERVED_HEADERS:
            raise ValueError(f"{name!r} is read by the server itself; choose another header")
        return name

    @model_validator(mode="after")
    def _one_source(self) -> RestrictedApiSettings:
        if (self.values_from_env is None) == (self.values_from_file is None):
            raise ValueError(
                "set exactly one of values_from_env (an environment variable) or "
                "values_from_file (a file) to hold the accepted values"
            )
        return self

    @property
    def source(self) -> str:
        """Where the values come from, for messages (never the values themselves)."""
        if self.values_from_env is not None:
            return f"environment variable {self.values_from_env}"
        return f"file {self.values_from_file}"

    def read_values(self) -> list[str]:
        """The accepted values as they are now.

        ValueError (naming where it looked) when none can be read: a restriction
        nobody can pass is a mistake, not a way to close an API."""
        if self.values_from_env is not None:
            text = os.environ.get(self.values_from_env)
            if text is None:
                raise ValueError(f"{self.source} is not set")
        else:
            assert self.values_from_file is not None
            try:
                text = Path(self.values_from_file).read_text()
            except OSError as error:
                raise ValueError(f"{self.source} cannot be read: {error.strerror}") from None
        values = [value.strip() for value in re.split(r"[,\n]", text) if value.strip()]
        if not values:
            raise ValueError(f"{self.source} holds no value")
        return values


def check_unique_groups(restrictions: list[RestrictedApiSettings]) -> None:
    """ValueError if an API group is restricted twice (which header would it need?)."""
    seen: set[str] = set()
    for restriction in restrictions:
        twice = seen.intersection(restriction.apis)
        if twice:
            raise ValueError(
                f"API group {sorted(twice)[0]!r} is in two restrictions; list each group "
                "once (several keys for one header go in the same values)"
            )
        seen.update(restriction.apis)
