"""What server and model settings share: the file names and the order of sources."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar

from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
)

SERVER_SETTINGS_FILE = "settings.json"
MODEL_SETTINGS_FILE = "model-settings.json"

# Values given as command-line flags (`inferd start --http-port`), above the
# environment. Init arguments carry the file, below it; pydantic-settings has one
# init source, so the flags reach the model through this variable while
# ``given_on_the_command_line`` builds it.
_command_line: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "inferd_command_line", default=None
)


@contextmanager
def given_on_the_command_line(values: Mapping[str, Any]) -> Iterator[None]:
    """Settings built inside this block take ``values`` over the environment."""
    token = _command_line.set(dict(values))
    try:
        yield
    finally:
        _command_line.reset(token)


class EnvFirstSettings(BaseSettings):
    """Settings read, in precedence order, from ``INFERD_<prefix>*`` env vars,
    ``MLSERVER_<prefix>*`` env vars, then the file (passed as init arguments)."""

    env_infix: ClassVar[str] = ""
    # Whether flags given with ``given_on_the_command_line`` apply (server settings).
    takes_flags: ClassVar[bool] = False

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        prefix = cls.env_infix
        flags = (_command_line.get() or {}) if cls.takes_flags else {}
        return (
            InitSettingsSource(settings_cls, init_kwargs=dict(flags)),
            EnvSettingsSource(settings_cls, env_prefix=f"INFERD_{prefix}", case_sensitive=False),
            EnvSettingsSource(settings_cls, env_prefix=f"MLSERVER_{prefix}", case_sensitive=False),
            init_settings,
        )
