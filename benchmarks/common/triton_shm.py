"""tritonclient's shared memory utilities, importable with a current setuptools.

``tritonclient.utils.shared_memory`` (2.41) finds its C library with
``pkg_resources.resource_filename``; setuptools 81 removed ``pkg_resources``. When it
is missing, a stand-in with that one function (importlib.resources) is installed
first, so the tests use tritonclient's own code, unchanged.
"""

from __future__ import annotations

import importlib.resources
import sys
import types

try:
    import pkg_resources  # noqa: F401
except ImportError:
    stand_in = types.ModuleType("pkg_resources")

    def resource_filename(package: str, resource: str) -> str:
        return str(importlib.resources.files(package).joinpath(resource))

    stand_in.resource_filename = resource_filename  # type: ignore[attr-defined]
    sys.modules["pkg_resources"] = stand_in

import tritonclient.utils.shared_memory as shared_memory

__all__ = ["shared_memory"]
