"""Dispatch: per model version, when and how requests reach the workers.

The scheduler, its policies (adaptive batching, sequences), the bounded queue,
stream limits. Imports workers' contract (``inferd.workers.base``), never the
server or the serving layer above it.
"""
