"""Serving: the protocol-neutral core the edges call.

The dataplane (health, metadata, infer, repository), the registry of loaded
model versions and their lifecycle, the model repository on disk, draining on
shutdown and the response cache. Imports dispatch and below, never the server.
"""
