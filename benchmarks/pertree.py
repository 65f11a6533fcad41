"""``--baseline-src PATH`` for the commands that are not side-by-side scenarios.

A scenario runs the baseline's servers as contenders of its own rounds. The other
commands measure one tree at a time, so with ``--baseline-src`` the whole command
runs once per tree, this one then the baseline's, each in a process of its own with
``PYTHONPATH`` (and ``--inferd-src`` where the command takes it) set to that tree.
With ``--json-out FILE`` each tree's figures go to ``FILE`` with ``.this`` or
``.baseline`` before its suffix, and FILE holds both. Run on a quiet machine, or
twice in turn, since the two trees do not alternate within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .servers import CHECKOUT_SRC, resolve_source


def split_baseline(argv: Sequence[str]) -> tuple[Path | None, list[str]]:
    """``--baseline-src PATH`` taken out of ``argv``; (PATH or None, the rest)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--baseline-src", type=Path)
    known, rest = parser.parse_known_args(list(argv))
    return known.baseline_src, rest


def with_option(argv: Sequence[str], option: str, value: str) -> list[str]:
    """``argv`` with ``option`` set to ``value`` (replaced where given, else added)."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == option and i + 1 < len(out):
            out[i + 1] = value
            return out
        if word.startswith(option + "="):
            out[i] = f"{option}={value}"
            return out
    return [*out, option, value]


def option_value(argv: Sequence[str], option: str) -> str | None:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument(option)
    known, _ = parser.parse_known_args(list(argv))
    value: str | None = getattr(known, option.lstrip("-").replace("-", "_"))
    return value


def run_per_tree(name: str, argv: Sequence[str], baseline: Path, takes_source: bool) -> int:
    """The command once on this tree, once on ``baseline``'s; the worse exit status."""
    this = resolve_source(Path(option_value(argv, "--inferd-src") or CHECKOUT_SRC))
    trees = {"this": this, "baseline": resolve_source(baseline)}
    json_out = option_value(argv, "--json-out")
    figures: dict[str, Any] = {}
    status = 0
    for label, src in trees.items():
        print(f"== {name} on the {label} tree ({src})", flush=True)
        args = with_option(argv, "--inferd-src", str(src)) if takes_source else list(argv)
        out = Path(json_out).with_suffix(f".{label}{Path(json_out).suffix}") if json_out else None
        if out is not None:
            args = with_option(args, "--json-out", str(out))
        paths = [str(src), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        done = subprocess.run([sys.executable, "-m", "benchmarks", name, *args], env=env)
        status = max(status, done.returncode)
        if out is not None and out.is_file():
            figures[label] = json.loads(out.read_text())
    if json_out:
        record = {
            "command": name,
            "argv": list(argv),
            "trees": {k: str(v) for k, v in trees.items()},
        }
        Path(json_out).write_text(json.dumps({**record, "figures": figures}, indent=2) + "\n")
    return status
