"""A tiny GPT-2-style causal LM with a chat template, and a tiny encoder for embeddings,
built from random seeded weights and saved as save_pretrained does: no download."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

# Words both tiny Hugging Face models know (tests/frameworks.py's text classifier too).
TINY_VOCABULARY = "the a movie film good bad great awful is was very not plot acting".split()  # noqa: SIM905

ROLES = ["<|system|>", "<|user|>", "<|assistant|>"]
END = "<|end|>"
# Tools (OpenAI's tool definitions) as a system turn of their names, as a real template
# shows them to its model.
CHAT_TEMPLATE = (
    "{% if tools %}<|system|> {% for tool in tools %}{{ tool.function.name }} {% endfor %}"
    "{% endif %}"
    "{% for message in messages %}<|{{ message.role }}|> {{ message.content }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@dataclass(frozen=True)
class LmShape:
    """The size of a random GPT-2 (the tiny one by default)."""

    layers: int = 2
    width: int = 32
    words: int = 0  # the vocabulary padded with filler words to this many; 0: not padded
    initializer_range: float = 0.5  # 0.5: varied words, not one word over and over


# GPT-2 small's shape (124M parameters): random weights, the benchmarks' real-shaped model.
GPT2_SMALL = LmShape(layers=12, width=768, words=50257, initializer_range=0.02)


def save_tiny_chat_lm(
    folder: Path,
    *,
    seed: int = 0,
    heads: int = 2,
    positions: int = 256,
    endless: bool = False,
    shape: LmShape = LmShape(),
    extra_words: tuple[str, ...] = (),
) -> None:
    """A 2-layer GPT-2 on a word-level vocabulary with an end token and a chat template
    (``shape``: another size, e.g. :data:`GPT2_SMALL`).

    ``heads``: attention heads over the 32 wide embedding; 1 gives a head size of 32, which
    vLLM's CPU attention takes (2 heads of 16 fail; benchmarks openai --vllm-python).
    ``positions``: its context, in tokens. ``endless``: the end token's embedding (tied to
    the output layer) zeroed, so its logit is 0, below the best word's: greedy decoding
    runs to ``max_tokens``. ``extra_words``: more words after the usual ones (``{``,
    ``}``, ``true``: enough JSON for constrained decoding to spell)."""
    torch = importlib.import_module("torch")  # the huggingface extra
    transformers = importlib.import_module("transformers")
    tokenizers = importlib.import_module("tokenizers")
    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", END, *ROLES, *TINY_VOCABULARY, *extra_words]
    words += [f"w{i}" for i in range(len(words), shape.words)]
    backend = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="[UNK]")
    )
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        eos_token=END,
        additional_special_tokens=ROLES,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=positions,
        n_embd=shape.width,
        n_layer=shape.layers,
        n_head=heads,
        bos_token_id=None,
        eos_token_id=words.index(END),
        pad_token_id=0,
        initializer_range=shape.initializer_range,
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    if endless:
        with torch.no_grad():
            model.transformer.wte.weight[words.index(END)] = 0.0
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
