"""What ``inferd start`` was given on its command line, and how it reaches the
server's other processes.

Flags are settings: their values go to the settings model as typed, above the
environment (:func:`inferd.settings.base.given_on_the_command_line`), so they are
validated, and refused, as the same setting in a file would be. Protocol processes
and the model host read their settings again when they start; they find the
command line in :data:`COMMAND_LINE_ENV`, which the supervisor's process sets for
the processes it starts. Workers get the settings object itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from inferd.errors import ConfigurationError

# Carries the command line to the processes `inferd start` starts (never a setting).
COMMAND_LINE_ENV = "INFERD_COMMAND_LINE"


def option_name(setting: str) -> str:
    """The flag of a setting: ``http_port`` -> ``--http-port``."""
    return "--" + setting.replace("_", "-")


@dataclass(frozen=True)
class CommandLine:
    """A settings file given with ``--settings``, and settings given as flags."""

    settings_file: Path | None = None
    values: Mapping[str, str] = field(default_factory=dict)
    """Setting name -> the value as typed (validated by the settings model)."""

    def export(self) -> None:
        """Make this command line the one the processes started from here read."""
        os.environ[COMMAND_LINE_ENV] = json.dumps(
            {
                "settings_file": str(self.settings_file) if self.settings_file else None,
                "values": dict(self.values),
            }
        )

    @classmethod
    def from_environment(cls) -> CommandLine:
        """The command line the supervisor exported; empty when started otherwise."""
        raw = os.environ.get(COMMAND_LINE_ENV)
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            settings_file = data["settings_file"]
            values = {str(name): str(value) for name, value in data["values"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigurationError(f"{COMMAND_LINE_ENV} is not what inferd start sets") from None
        return cls(Path(settings_file) if settings_file else None, values)


class CommandLineError(ConfigurationError):
    """Settings refused for a value given as a flag: a usage error (exit status 2)."""
