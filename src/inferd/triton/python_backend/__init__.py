"""Triton's Python backend: ``model.py`` files with ``class TritonPythonModel``, served
unchanged (their ``triton_python_backend_utils`` is :mod:`.pb_utils`)."""
