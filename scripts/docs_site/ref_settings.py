"""The settings reference page, read from the pydantic models in inferd.settings.

Each field's text is its attribute docstring in the source (pydantic keeps no
description for them), so the page says what the code says, and a field added to
a settings model appears here at the next build.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import textwrap
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from inferd.settings import (
    CORSSettings,
    MetadataTensorSettings,
    ModelParameters,
    ModelSettings,
    SequenceBatchingSettings,
    ServerSettings,
)
from inferd.settings.base import EnvFirstSettings
from inferd.settings.security import RestrictedApiSettings
from inferd.settings.warmup import WarmupInputSettings, WarmupSettings

# (model, where it is written), in the order the page shows them.
SECTIONS: tuple[tuple[type[BaseModel], str], ...] = (
    (ServerSettings, "`settings.json`, at the top level"),
    (CORSSettings, "`settings.json`, `cors_settings`"),
    (RestrictedApiSettings, "`settings.json`, each item of `restricted_apis`"),
    (ModelSettings, "`model-settings.json`, at the top level"),
    (ModelParameters, "`model-settings.json`, `parameters`"),
    (MetadataTensorSettings, "`model-settings.json`, each item of `inputs` and `outputs`"),
    (SequenceBatchingSettings, "`model-settings.json`, `sequence_batching`"),
    (WarmupSettings, "`model-settings.json`, each item of `model_warmup`"),
    (WarmupInputSettings, "`model-settings.json`, each input of a `model_warmup` item"),
)
# A setting's docstring that names Triton's spelling of it: Triton's ``--flag`` or ``field``.
_TRITON = re.compile(r"Triton's\s+``([^`]+)``")

INTRO = """\
# Settings

Every server setting (`settings.json`) and model setting (`model-settings.json`),
generated from the settings models in `src/inferd/settings` when the site is built.

Each value comes from, in order of precedence: the environment, then the file, then
the default. Server settings read `INFERD_<NAME>`, then MLServer's `MLSERVER_<NAME>`;
model settings `INFERD_MODEL_<NAME>`, then `MLSERVER_MODEL_<NAME>` (they then apply to
every model). A list or an object is written in its variable as JSON. The names and
defaults follow MLServer's files, so an MLServer deployment's files are read
unchanged. Triton's spelling is given where the setting's own documentation names it.
"""


def attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """The docstring written under each annotated field of ``model``'s class body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for field, following in itertools.pairwise(body):
        if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)):
            continue
        value = following.value if isinstance(following, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            docs[field.target.id] = inspect.cleandoc(value.value)
    return docs


def markdown_text(docstring: str) -> str:
    """A docstring's reStructuredText literals as Markdown, on one line."""
    return " ".join(docstring.replace("``", "`").split())


def type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    text = re.sub(r"\b(typing|inferd(\.\w+)*)\.", "", text)
    return text.replace("NoneType", "None")


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        factory = field.default_factory
        first = (inspect.getdoc(factory) or "").split(".")[0].strip()
        return first[:1].lower() + first[1:] if first else f"computed by `{factory.__name__}()`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{field.default!r}`"


def environment_names(model: type[BaseModel], name: str) -> str:
    if not issubclass(model, EnvFirstSettings):
        return ""
    infix = model.env_infix
    return f"`INFERD_{infix}{name.upper()}`, `MLSERVER_{infix}{name.upper()}`"


def triton_name(docstring: str) -> str:
    return ", ".join(f"`{found}`" for found in dict.fromkeys(_TRITON.findall(docstring)))


def section(model: type[BaseModel], where: str) -> list[str]:
    docs = attribute_docs(model)
    lines = [f"## {model.__name__}", "", f"Written in {where}.", ""]
    summary = inspect.getdoc(model)
    if summary:
        lines += [markdown_text(summary), ""]
    for name, field in model.model_fields.items():
        text = docs.get(name, "")
        facts = [f"`{type_name(field.annotation)}`", f"default {default_text(field)}"]
        variables = environment_names(model, name)
        if variables:
            facts.append(f"environment {variables}")
        triton = triton_name(text)
        if triton:
            facts.append(f"Triton: {triton}")
        # Two spaces end the line: the facts, then the text, in one list item.
        lines += [f"- **`{name}`** · {' · '.join(facts)}  ", f"  {markdown_text(text)}", ""]
    return [*lines, ""]


def page() -> str:
    lines = [INTRO]
    for model, where in SECTIONS:
        lines += section(model, where)
    return "\n".join(lines)
