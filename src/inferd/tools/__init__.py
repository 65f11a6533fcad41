"""Client-side tools users run around a V2 server: ``inferd infer``, ``bench`` and ``tune``.

``infer`` and ``bench`` talk to any Open Inference Protocol server (inferd, MLServer,
Triton, KServe) over its public REST and gRPC APIs only. Of inferd they import only
what defines the wire, so that a tool and the server agree on it: the protocol's
messages and parameter maps (``inferd.protocol``) and the V2 datatypes as numpy
(``inferd.tensors``, with ``inferd.errors`` for what it raises); never the server,
the serving core, dispatch, workers or runtimes. ``tune`` starts inferd on a copy of
a repository, so it also reads that repository as the server does
(``inferd.settings``, ``inferd.serving.repository``). tests/unit/test_tools_imports.py
keeps this true.
"""
