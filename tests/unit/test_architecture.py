"""docs/design.md stays true: its layout lists every package, and imports follow its layers.

The layout section names each package of ``src/inferd`` once (as ``inferd/...``);
the import rules are the layers of ``LAYERS`` below, which the design document
lists in the same order. A module may import its own layer and the layers under
it, never one above; only the protocol edges (and the generated protocol code and
the client tools) import the web and RPC frameworks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "inferd"
DESIGN = ROOT / "docs" / "design.md"

# Top to bottom, as docs/design.md lists them ("Import rules"). A name is a package
# of inferd or a module at its root, or a module of the model host's package
# (``host.client``): that package holds one feature's parts, each at the layer of
# what it imports; the package itself holds nothing.
LAYERS: list[set[str]] = [
    {"__main__", "cli", "ray"},
    {"tools"},
    {"supervisor", "host.placement", "host.on_demand", "host.process"},
    {"server", "host.edge", "host.streams"},
    {"serving", "host.backend"},
    {"dispatch"},
    {"workers", "host.client"},
    {"compat"},
    {"runtimes"},
    {"triton"},
    {"context", "model", "custom_calls", "generation", "model_calls", "__init__"},
    {"observability"},
    {"custom_metrics"},
    {"settings"},
    {"tensors", "types", "errors", "json_refusals", "version", "protocol", "user_code", "host"},
]
# The package whose modules sit at layers of their own (above).
FEATURE_PACKAGE = "host"
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}
EDGE_ONLY = ("starlette", "uvicorn", "grpc", "grpc_health", "grpc_reflection", "google.protobuf")
MAY_IMPORT_EDGE_LIBRARIES = {"supervisor", "server", "protocol", "tools"}


def design_section(title: str) -> str:
    text = DESIGN.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/design.md has no '## {title}' section"
    return match.group(1)


def packages() -> set[str]:
    return {
        "inferd/" + str(init.parent.relative_to(PACKAGE)) + "/"
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE
    }


def test_the_layout_lists_every_package_and_nothing_else() -> None:
    listed = set(re.findall(r"`(inferd/[\w/]+/)`", design_section("Layout")))
    assert listed == packages(), (
        f"listed but missing: {sorted(listed - packages())}; "
        f"present but not listed: {sorted(packages() - listed)}"
    )


def test_the_import_rules_name_the_layers_in_order() -> None:
    rules = design_section("Import rules")
    rows = re.findall(r"^\d+\. (.+)$", rules, re.M)
    named = [set(re.findall(r"`([\w.]+)`", row)) for row in rows]
    assert named == LAYERS


def top_name(module: str) -> str | None:
    """The layer name of an ``inferd`` module: its package, or itself at the root."""
    parts = module.split(".")
    if parts[0] != "inferd":
        return None
    if len(parts) > 2 and parts[1] == FEATURE_PACKAGE:
        return f"{FEATURE_PACKAGE}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


PACKAGES_OF_MODULES = ("inferd", f"inferd.{FEATURE_PACKAGE}")


def layer_name(relative: Path) -> str:
    """The layer name of a module under src/inferd (see :func:`top_name`)."""
    if len(relative.parts) == 1:
        return relative.stem
    if relative.parts[0] == FEATURE_PACKAGE and relative.stem != "__init__":
        return f"{FEATURE_PACKAGE}.{relative.stem}"
    return relative.parts[0]


def imports_of(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module in PACKAGES_OF_MODULES:
            # `from inferd import custom_metrics` imports that module, not the package's API
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "protocol" not in p.parts)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_layer_above_its_own(path: Path) -> None:
    relative = path.relative_to(PACKAGE)
    mine = layer_name(relative)
    upward = [
        f"line {line}: {module}"
        for line, module in imports_of(path)
        if (other := top_name(module)) is not None and LAYER_OF[other] < LAYER_OF[mine]
    ]
    assert not upward, f"{relative} imports a layer above its own: {upward}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_protocol_edges_import_web_and_rpc_frameworks(path: Path) -> None:
    relative = path.relative_to(PACKAGE)
    if relative.parts[0] in MAY_IMPORT_EDGE_LIBRARIES:
        return
    found = [
        f"line {line}: {module}"
        for line, module in imports_of(path)
        if any(module == lib or module.startswith(lib + ".") for lib in EDGE_ONLY)
    ]
    assert not found, f"{relative} imports a protocol framework: {found}"


def test_every_module_is_under_400_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in MODULES
        if (n := len(p.read_text().splitlines())) >= 400
    }
    assert not long, f"modules of 400 lines or more: {long}"


# Server-wide operations travel between processes as typed messages
# (serving/operations.py): REST paths exist at the edges only. The supervisor's
# edges are the REST port it answers while the fork parent loads (loading.py) and
# its readiness poll of each process's REST app (children.py). A path in a message
# to a person ("use POST /v2/models/...") is no route.
SUPERVISOR_EDGES = {"loading.py", "children.py"}
BELOW_THE_EDGES = sorted(
    p
    for p in MODULES
    if p.relative_to(PACKAGE).parts[0] in {"serving", "dispatch", "workers", "host"}
    or (p.parent.name == "supervisor" and p.name not in SUPERVISOR_EDGES)
)


@pytest.mark.parametrize("path", BELOW_THE_EDGES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_below_the_edges_spells_a_route(path: Path) -> None:
    spelled = [
        f"line {node.lineno}: {node.value!r}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if re.match(r"(\^|\\?/)?(v2|private)/", node.value)
    ]
    assert not spelled, f"{path.relative_to(PACKAGE)} spells a REST route: {spelled}"


# Hosting is a backend behind the data plane (serving/backends.py): the registry and
# dispatch serve whatever backend loaded a version, and know nothing of the model host.
KNOWS_NOTHING_OF_HOSTING = sorted(
    [
        *(PACKAGE / "dispatch").glob("*.py"),
        PACKAGE / "serving" / "registry.py",
        PACKAGE / "serving" / "model_version.py",
    ]
)
HOSTING_MODULES = ("inferd.host.",)
HOSTING_WORDS = re.compile(r"\bhost(ed|ing)?\b|model host|HostClient|HostBackend", re.I)


@pytest.mark.parametrize(
    "path", KNOWS_NOTHING_OF_HOSTING, ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_dispatch_and_the_registry_know_nothing_of_hosting(path: Path) -> None:
    relative = path.relative_to(PACKAGE)
    imported = [
        f"line {line}: {module}"
        for line, module in imports_of(path)
        if module.startswith(HOSTING_MODULES)
    ]
    assert not imported, f"{relative} imports the model host's client: {imported}"
    mentions = [
        f"line {number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if HOSTING_WORDS.search(line)
    ]
    assert not mentions, f"{relative} mentions hosting: {mentions}"
