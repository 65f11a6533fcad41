"""Tensors: datatypes, wire encodings of numpy arrays, MLServer's content types.

The bottom of the package beside ``inferd.types`` and ``inferd.errors``.
"""
