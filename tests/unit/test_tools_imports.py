"""Of inferd, the tools import only what their package docstring says they may."""

from __future__ import annotations

import ast
from pathlib import Path

import inferd.tools

TOOLS = Path(inferd.tools.__file__).parent
# What defines the wire: the server and a tool must agree on it.
WIRE = ("inferd.protocol", "inferd.tensors", "inferd.errors", "inferd.tools")
# `inferd tune` starts inferd on a copy of a repository it reads as the server does.
TUNE = ("inferd.settings", "inferd.serving.repository")
TUNE_MODULES = {"tuneserver.py"}


def inferd_imports(path: Path) -> set[str]:
    """Every inferd module ``path`` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "inferd" or name.startswith("inferd.")}


def within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(f"{package}.") for package in packages)


def test_the_tools_import_only_the_wire_format() -> None:
    outside = {
        f"{path.name}: {module}"
        for path in sorted(TOOLS.glob("*.py"))
        for module in inferd_imports(path)
        if not within(module, WIRE + (TUNE if path.name in TUNE_MODULES else ()))
    }
    assert outside == set()


def test_the_check_sees_an_import_of_the_core(tmp_path: Path) -> None:
    source = tmp_path / "tool.py"
    source.write_text("def f():\n    from inferd.server.grpc.codec import x\n")
    assert not within(next(iter(inferd_imports(source))), WIRE)
