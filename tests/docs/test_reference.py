"""The generated reference lists everything the code defines: every settings model
and field, every metric family named in the source, every command and option, every
REST operation. What is generated is read from the hooks the site build runs."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import click
from pydantic import BaseModel

import inferd.settings
from inferd.cli import main
from inferd.settings import base
from tests.docs.pages import ROOT

HOOKS = ROOT / "scripts" / "docs_site" / "hooks.py"
SRC = ROOT / "src" / "inferd"
# Calls whose first argument names a metric family.
_FAMILY_CALLS = {
    "CounterMetricFamily",
    "GaugeMetricFamily",
    "HistogramMetricFamily",
    "SummaryMetricFamily",
    "gauge",
    "Family",
}


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inferd_docs_hooks", HOOKS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def reference_module(name: str) -> ModuleType:
    """One of scripts/docs_site's generators (importable once the hooks module ran)."""
    generated()
    return importlib.import_module(name)


@functools.cache
def generated() -> dict[str, str]:
    """Site path -> text of each page the build generates (read once per session)."""
    return dict(_hooks().generated_pages())


def test_every_settings_model_and_field_is_in_the_settings_reference() -> None:
    ref_settings = reference_module("ref_settings")

    documented = {model for model, _ in ref_settings.SECTIONS}
    package = Path(inferd.settings.__file__).parent
    for path in package.glob("*.py"):
        module = sys.modules.get(f"inferd.settings.{path.stem}") or importlib.import_module(
            f"inferd.settings.{path.stem}"
        )
        for _, cls in inspect.getmembers(module, inspect.isclass):
            own = cls.__module__ == module.__name__ and issubclass(cls, BaseModel)
            if own and cls is not base.EnvFirstSettings and cls.model_fields:
                assert cls in documented, f"{cls.__name__} is in no section of ref_settings"
    page = generated()["reference/settings.md"]
    for model in documented:
        for name in model.model_fields:
            assert f"- **`{name}`** · " in page, f"{model.__name__}.{name}"
    assert "`INFERD_HTTP_PORT`, `MLSERVER_HTTP_PORT`" in page
    assert "`INFERD_MODEL_MAX_BATCH_SIZE`" in page
    assert "`--repository-poll-secs`" in page  # the Triton spelling, from its docstring


def _constants(tree: ast.Module) -> dict[str, str]:
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _family_name(argument: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if isinstance(argument, ast.Name):
        return constants.get(argument.id)
    if isinstance(argument, ast.JoinedStr):  # f"{prefix}_requests": the default prefix
        return "".join(
            part.value if isinstance(part, ast.Constant) else "rest_server"
            for part in argument.values
        )
    return None


def metric_names_in_source() -> set[str]:
    names: set[str] = set()
    for path in SRC.glob("**/*.py"):
        tree = ast.parse(path.read_text())
        constants = _constants(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            function = node.func
            called = (
                function.attr
                if isinstance(function, ast.Attribute)
                else getattr(function, "id", None)
            )
            if called in _FAMILY_CALLS:
                name = _family_name(node.args[0], constants)
                if name and name.isidentifier():
                    names.add(name)
    return names


def test_every_metric_named_in_the_source_is_in_the_metrics_reference() -> None:
    ref_metrics = reference_module("ref_metrics")

    in_source = metric_names_in_source()
    assert {
        "model_infer_request_success",
        "rest_server_requests",
        "server_process_pss_bytes",
        "protocol_processes_answered",
    } <= in_source
    listed = ref_metrics.names()
    assert not in_source - listed, f"not in the metrics reference: {in_source - listed}"
    page = generated()["reference/metrics.md"]
    assert (
        "| `model_infer_request_success` | counter (`_total`) | `model_name`, `model_version` |"
        in page
    )
    assert "| `nv_gpu_utilization` | gauge | `gpu_uuid` |" in page
    assert "| `server_process_pss_bytes` | gauge | `role`, `pid` |" in page


def _commands(
    command: click.Command, path: tuple[str, ...]
) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found += _commands(sub, (*path, name))
    return found


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    page = generated()["reference/cli.md"]
    commands = _commands(main, ("inferd",))
    assert {"start", "infer", "bench", "tune"} <= {path[-1] for path, _ in commands}
    for path, command in commands:
        section = page.split(f"## `{' '.join(path)}`\n", 1)
        assert len(section) == 2, f"no section for {' '.join(path)}"
        body = section[1].split("\n## `", 1)[0]
        for parameter in command.params:
            if isinstance(parameter, click.Option) and not parameter.hidden:
                for declaration in parameter.opts:
                    assert f"`{declaration}`" in body, f"{' '.join(path)} {declaration}"
            elif isinstance(parameter, click.Argument):
                assert f"`{parameter.human_readable_name}`" in body


def test_every_rest_operation_is_in_the_api_reference() -> None:
    ref_api = reference_module("ref_api")

    document = ref_api.document()
    page = generated()["reference/rest-api.md"]
    count = 0
    for path, item in document["paths"].items():
        for method in ref_api.METHODS:
            if method in item:
                assert f"### `{method.upper()} {path}`" in page
                count += 1
    assert count >= 30
    assert "### `POST /v2/models/{name}/infer`" in page
    assert '"openapi": "3.1.0"' in generated()["reference/openapi.json"]
