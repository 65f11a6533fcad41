"""The command-line reference page, read from the click group ``inferd.cli.main``:
every command, its arguments and options, as ``--help`` prints them."""

from __future__ import annotations

import inspect

import click
import click.core

from inferd.cli import main

# click 8.2+ marks "no default" with a sentinel of its own; older clicks use None.
_UNSET = getattr(click.core, "UNSET", None)

INTRO = """\
# Command line

Every `inferd` command, argument and option, generated from the click commands in
`src/inferd/cli.py` and `src/inferd/tools` when the site is built; `inferd COMMAND
--help` prints the same.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(parameter: click.Parameter) -> str:
    if isinstance(parameter, click.Option) and parameter.is_flag and not parameter.default:
        return ""
    default = parameter.default
    if default is None or default is _UNSET or default in ((), "") or callable(default):
        return ""
    if isinstance(parameter, click.Option) and parameter.show_default is False:
        return ""
    return f"`{default}`"


def _declarations(parameter: click.Parameter) -> str:
    names = [*parameter.opts, *parameter.secondary_opts]
    return ", ".join(f"`{name}`" for name in names)


def _type(parameter: click.Parameter, context: click.Context) -> str:
    if isinstance(parameter, click.Option) and parameter.is_flag:
        return "flag"
    return _cell(parameter.type.get_metavar(parameter, context) or parameter.type.name)


def command_section(
    path: list[str], command: click.Command, parent: click.Context | None
) -> list[str]:
    context = click.Context(command, info_name=path[-1], parent=parent)
    lines = [f"## `{' '.join(path)}`", ""]
    lines += [
        "```text",
        " ".join(command.collect_usage_pieces(context)).join([f"Usage: {' '.join(path)} ", ""]),
        "```",
        "",
    ]
    if command.help:
        lines += [inspect.cleandoc(command.help).replace("\b\n", ""), ""]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if arguments:
        lines += ["| argument | required |", "|---|---|"]
        lines += [
            f"| `{p.human_readable_name}` | {'yes' if p.required else 'no'} |" for p in arguments
        ]
        lines.append("")
    if options:
        lines += ["| option | type | default | what it does |", "|---|---|---|---|"]
        for option in options:
            cells = (
                _declarations(option),
                _type(option, context),
                _default(option),
                _cell(option.help or ""),
            )
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                lines += command_section([*path, name], sub, context)
    return lines


def page() -> str:
    return "\n".join([INTRO, *command_section(["inferd"], main, None)])
