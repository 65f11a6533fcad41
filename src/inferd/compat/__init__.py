"""Compatibility layers that let code written for other servers run on inferd.

``inferd.compat.mlserver`` is MLServer's Python API (``mlserver``, ``mlserver.types``,
``mlserver.codecs``, ...), served under the name ``mlserver`` when the real MLServer
is not installed (see :mod:`inferd.compat.importer`).
"""
