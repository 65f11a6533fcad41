"""``python -m benchmarks <command> [options]`` (``--list``: every command, one line each).

Run from the repository root. The commands are in one table, ``registry.COMMANDS``;
``python -m benchmarks <command> --help`` gives a command's options; every command
also takes ``--baseline-src PATH`` (the same figures for another checkout).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from . import registry

USAGE = "usage: python -m benchmarks COMMAND [options]   (--list: the commands)"


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--list"]:
        print(registry.listing())
        return 0
    if not args or args[0] in ("-h", "--help"):
        print(f"{USAGE}\n\n{registry.listing()}")
        return 0 if args else 2
    if registry.find(args[0]) is None:
        print(f"{USAGE}\nno command {args[0]!r}; the commands:\n{registry.listing()}")
        return 2
    return registry.run(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
