"""``import mlserver`` without MLServer: an alias onto :mod:`inferd.compat.mlserver`.

:func:`install_mlserver_alias` puts a finder on ``sys.meta_path`` that resolves
``mlserver`` and ``mlserver.<sub>`` to the modules of the same name under
``inferd.compat.mlserver`` (the same module objects, so ``mlserver.types.X is
inferd.compat.mlserver.types.X``). It is installed only when no real ``mlserver``
can be imported: an installed MLServer is never shadowed. The runtime loader
installs it before importing a model's code, in the server and in every worker.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

ALIAS = "mlserver"
TARGET = "inferd.compat.mlserver"


class _MLServerAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        real = importlib.util.find_spec(_target_name(fullname))
        if real is None:  # e.g. mlserver.kafka: no such module here
            return None
        return importlib.util.spec_from_loader(
            fullname, self, is_package=real.submodule_search_locations is not None
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(_target_name(spec.name))

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias' spec on the module: give it back its own.
        module.__spec__ = importlib.util.find_spec(module.__name__)


def _target_name(fullname: str) -> str:
    return TARGET + fullname[len(ALIAS) :]


_installed: bool | None = None


def install_mlserver_alias() -> bool:
    """Make ``import mlserver`` work; whether the alias is in use (False: a real
    MLServer is importable and is what ``mlserver`` means)."""
    global _installed
    if _installed is None:
        _installed = ALIAS not in sys.modules and importlib.util.find_spec(ALIAS) is None
        if _installed:
            sys.meta_path.insert(0, _MLServerAlias())
    return _installed
