"""The tiny chat LM of ``benchmarks.common.tiny_llm``, which the benchmarks share; here a
missing Hugging Face extra skips the calling test module (or fails, as tests/frameworks.py
decides) instead of raising ImportError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import tiny_llm
from benchmarks.common.tiny_llm import *  # noqa: F403
from tests.frameworks import require_module


def save_tiny_chat_lm(folder: Path, **options: Any) -> None:
    for name in ("torch", "transformers", "tokenizers"):
        require_module(name, "huggingface")
    tiny_llm.save_tiny_chat_lm(folder, **options)
