"""Where each server setting's value came from, for ``inferd settings``.

The order is the settings' own (:mod:`inferd.settings.base`): a flag, then
``INFERD_<NAME>``, then ``MLSERVER_<NAME>``, then the settings file, then the
default. ``model_repository_root`` left unset is the folder served, which has a
source of its own (``--model-repository``, the argument, ``INFERD_MODELS_DIR``...).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from inferd.settings.command_line import CommandLine, option_name
from inferd.settings.loader import env_variable, read_json_file, server_settings_file
from inferd.settings.server import ServerSettings

SourceKind = Literal["flag", "argument", "environment", "file", "default"]


@dataclass(frozen=True)
class Source:
    """Where a value came from: its kind, and which flag, variable or file."""

    kind: SourceKind
    where: str | None = None

    def __str__(self) -> str:
        return f"{self.kind} {self.where}" if self.where else self.kind


def folder_source(argument: Path | None, flag: Path | None) -> tuple[Path, Source]:
    """The folder served and where it was named: ``--model-repository``, the
    MODEL_REPOSITORY argument, ``INFERD_MODELS_DIR``/``MLSERVER_MODELS_DIR``, else the
    current folder. The caller has checked the flag and argument agree."""
    if flag is not None:
        return flag, Source("flag", "--model-repository")
    if argument is not None:
        return argument, Source("argument", "MODEL_REPOSITORY")
    variable = env_variable("models_dir")
    if variable is not None:
        return Path(os.environ[variable]), Source("environment", variable)
    return Path("."), Source("default")


def setting_sources(
    folder: Path, folder_given: Source, command_line: CommandLine
) -> dict[str, Source]:
    """Each server setting's source, for settings loaded from ``folder`` and
    ``command_line`` (the file is read again: what it names is what it held)."""
    path = server_settings_file(folder, command_line)
    in_file = read_json_file(path) if path else {}
    sources = {}
    for name in ServerSettings.model_fields:
        variable = env_variable(name)
        if name in command_line.values:
            sources[name] = Source("flag", option_name(name))
        elif variable is not None:
            sources[name] = Source("environment", variable)
        elif name in in_file:
            sources[name] = Source("file", str(path.resolve()) if path else None)
        elif name == "model_repository_root":
            sources[name] = folder_given
        else:
            sources[name] = Source("default")
    return sources


def as_json(settings: ServerSettings, sources: Mapping[str, Source]) -> str:
    """``{"setting": {"value": ..., "source": "flag", "from": "--http-port"}, ...}``."""
    values = settings.model_dump(mode="json")
    return json.dumps(
        {
            name: {"value": values[name], "source": source.kind, "from": source.where}
            for name, source in sources.items()
        },
        indent=2,
    )


def as_table(settings: ServerSettings, sources: Mapping[str, Source]) -> str:
    """One line per setting: its name, its value (JSON but for plain strings), its source."""
    values = settings.model_dump(mode="json")
    rows = [("SETTING", "VALUE", "SOURCE")]
    rows += [(name, _shown(values[name]), str(source)) for name, source in sources.items()]
    name_width = max(len(row[0]) for row in rows)
    # Long values (a CORS block) would push every source off the screen: not padded to.
    value_width = min(max(len(row[1]) for row in rows), 30)
    return "\n".join(
        f"{name:<{name_width}}  {value:<{value_width}}  {source}" for name, value, source in rows
    )


def _shown(value: Any) -> str:
    return value if isinstance(value, str) and value else json.dumps(value)
