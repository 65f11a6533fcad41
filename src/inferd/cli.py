"""The ``inferd`` command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from .errors import ConfigurationError
from .logs import configure_logging
from .server.app import InferenceServer
from .settings import load_server_settings
from .version import __version__


@click.group()
@click.version_option(__version__, prog_name="inferd")
def main() -> None:
    """inferd: serve machine-learning models over the Open Inference Protocol."""


@main.command()
@click.argument(
    "model_repository",
    default=".",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
def start(model_repository: Path) -> None:
    """Serve every model under MODEL_REPOSITORY (reads its settings.json, if any)."""
    try:
        settings = load_server_settings(model_repository)
    except ConfigurationError as error:
        raise click.ClickException(str(error)) from None
    if "model_repository_root" not in settings.model_fields_set:
        settings.model_repository_root = str(model_repository)
    elif not Path(settings.model_repository_root).is_absolute():
        settings.model_repository_root = str(model_repository / settings.model_repository_root)
    configure_logging(settings)
    try:
        _run(InferenceServer(settings))
    except ConfigurationError as error:
        raise click.ClickException(str(error)) from None


def _run(server: InferenceServer) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (no Windows build): asyncio works too
        asyncio.run(server.run())
    else:
        uvloop.run(server.run())
