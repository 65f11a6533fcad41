"""Client-side tools users run around a V2 server: ``inferd infer`` and ``inferd bench``.

They talk to any Open Inference Protocol server (inferd, MLServer, Triton, KServe)
over its public REST and gRPC APIs only; nothing here imports the server's core.
"""
