"""Triton's extensions over the core: model configuration, load overrides, logging.

Protocol-neutral (dictionaries and core errors); server/ puts them on the wire.
"""
