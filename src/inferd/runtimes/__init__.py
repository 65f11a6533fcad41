"""Runtimes: thin adapters from a framework's models to :class:`inferd.model.Model`.

One module per framework (``inferd.runtimes.sklearn``, ...). A module imports its
framework only when a model is loaded and fails with an install hint
(``pip install inferd[sklearn]``) when the framework is missing, so importing
this package stays cheap.
"""
