"""What server and model settings share: the file names and the order of sources."""

from __future__ import annotations

from typing import ClassVar

from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

SERVER_SETTINGS_FILE = "settings.json"
MODEL_SETTINGS_FILE = "model-settings.json"


class EnvFirstSettings(BaseSettings):
    """Settings read, in precedence order, from ``INFERD_<prefix>*`` env vars,
    ``MLSERVER_<prefix>*`` env vars, then the file (passed as init arguments)."""

    env_infix: ClassVar[str] = ""

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
        return (
            EnvSettingsSource(settings_cls, env_prefix=f"INFERD_{prefix}", case_sensitive=False),
            EnvSettingsSource(settings_cls, env_prefix=f"MLSERVER_{prefix}", case_sensitive=False),
            init_settings,
        )
