"""The model repository the OpenAI-compatible endpoint tests serve, and references to
compare with: a tiny chat LM (text-generation), a tiny encoder (feature-extraction),
and the custom ``Words`` runtime (tests/e2e/runtimes/openai_runtime.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.frameworks import require_module, save_tiny_text_classifier
from tests.support.models import write_model_folder
from tests.support.tiny_llm import save_tiny_chat_lm

HF = "inferd.runtimes.huggingface.HuggingFaceModel"
WORDS_RUNTIME = Path(__file__).resolve().parent / "runtimes" / "openai_runtime.py"
CHAT_LM, ENCODER, WORDS, ASYNC_WORDS = "chat-lm", "encoder", "words", "async-words"
SHOUTING = "shouting"  # an adapter of ASYNC_WORDS: a model of its own on /v1
ALL_MODELS = sorted([CHAT_LM, ENCODER, WORDS, ASYNC_WORDS, SHOUTING])


def write_repository(repository: Path, *, words_delay: float = 0.0, **words: Any) -> Path:
    """``repository`` with the four models; ``words`` settings go to the Words model."""
    save_tiny_chat_lm(repository / CHAT_LM / "weights")
    write_model_folder(
        repository,
        CHAT_LM,
        HF,
        parameters={"uri": "./weights", "extra": {"task": "text-generation"}},
    )
    save_tiny_text_classifier(repository / ENCODER / "weights")
    write_model_folder(
        repository,
        ENCODER,
        HF,
        parameters={"uri": "./weights", "extra": {"task": "feature-extraction"}},
    )
    extra = {"delay": words_delay, "closed_marker": str(repository / "closed")}
    write_model_folder(
        repository,
        WORDS,
        "openai_runtime.Words",
        files={WORDS_RUNTIME.name: WORDS_RUNTIME},
        parameters={"extra": extra},
        **words,
    )
    write_model_folder(
        repository,
        ASYNC_WORDS,
        "openai_runtime.AsyncWords",
        files={WORDS_RUNTIME.name: WORDS_RUNTIME},
        parameters={"extra": {"delay": words_delay}},
    )
    return repository


class Reference:
    """The same tiny models, called directly with transformers."""

    def __init__(self, repository: Path) -> None:
        self.transformers = require_module("transformers", "huggingface")
        self.torch = require_module("torch", "huggingface")
        lm = repository / CHAT_LM / "weights"
        self.tokenizer = self.transformers.AutoTokenizer.from_pretrained(str(lm))
        self.lm = self.transformers.AutoModelForCausalLM.from_pretrained(str(lm)).eval()
        encoder = repository / ENCODER / "weights"
        self.encoder_tokenizer = self.transformers.AutoTokenizer.from_pretrained(str(encoder))
        self.encoder = self.transformers.AutoModel.from_pretrained(str(encoder)).eval()

    def prompt_tokens(self, prompt: str) -> int:
        return len(self.tokenizer(prompt)["input_ids"])

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        text: str = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return text

    def greedy(self, prompt: str, max_tokens: int, *, special: bool = True) -> str:
        """transformers' own greedy decoding of ``prompt``."""
        encoded = self.tokenizer(prompt, add_special_tokens=special, return_tensors="pt")
        out = self.lm.generate(**encoded, max_new_tokens=max_tokens, do_sample=False)
        new = out[0][encoded["input_ids"].shape[1] :]
        text: str = self.tokenizer.decode(new, skip_special_tokens=True)
        return text

    def embeddings(self, texts: list[str]) -> Any:
        """Mean pooling of the encoder's last hidden states over each text's tokens."""
        torch = self.torch
        encoded = self.encoder_tokenizer(texts, padding=True, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.encoder(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).float()
        return ((hidden * mask).sum(1) / mask.sum(1)).numpy()
