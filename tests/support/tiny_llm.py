"""The tiny chat LM of ``benchmarks.common.tiny_llm``, which the benchmarks share; here a
missing Hugging Face extra skips the calling test module (or fails, as tests/frameworks.py
decides) instead of raising ImportError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.common import tiny_llm
from benchmarks.common.tiny_llm import *  # noqa: F403
from tests.frameworks import require_module


def save_tiny_chat_lm(folder: Path, **options: Any) -> None:
    for name in ("torch", "transformers", "tokenizers"):
        require_module(name, "huggingface")
    tiny_llm.save_tiny_chat_lm(folder, **options)


def save_tiny_llama_with_lora(folder: Path, adapter: Path, *, rank: int = 8) -> None:
    """A 2-layer Llama (vLLM serves LoRA for Llama, not GPT-2) on the tiny chat LM's
    tokenizer, and a LoRA adapter for it in PEFT's format (q_proj and v_proj, random
    non-zero ``lora_B``: it changes the greedy output)."""
    torch = require_module("torch", "huggingface")
    transformers = require_module("transformers", "huggingface")
    safetensors_torch = require_module("safetensors.torch", "huggingface")
    save_tiny_chat_lm(folder, heads=1, positions=1024, endless=True)  # its tokenizer
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=1024,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=0,
        initializer_range=0.5, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    for written in ("config.json", "model.safetensors"):  # the GPT-2's
        (folder / written).unlink()
    transformers.LlamaForCausalLM(config).eval().save_pretrained(str(folder))
    adapter.mkdir(parents=True, exist_ok=True)
    adapter_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
        "target_modules": ["q_proj", "v_proj"], "bias": "none",
        "base_model_name_or_path": str(folder),
    }  # fmt: skip
    (adapter / "adapter_config.json").write_text(json.dumps(adapter_config))
    generator = torch.Generator().manual_seed(1)
    tensors = {}
    for layer in range(config.num_hidden_layers):
        for projection in ("q_proj", "v_proj"):
            name = f"base_model.model.model.layers.{layer}.self_attn.{projection}"
            tensors[f"{name}.lora_A.weight"] = torch.randn(rank, 32, generator=generator)
            tensors[f"{name}.lora_B.weight"] = torch.randn(32, rank, generator=generator)
    safetensors_torch.save_file(tensors, str(adapter / "adapter_model.safetensors"))
