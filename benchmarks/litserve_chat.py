"""LitServe's OpenAISpec serving a causal LM from a folder, for ``benchmarks openai``.

Run with a Python that has litserve, torch and transformers (not inferd's):
``python litserve_chat.py MODEL_FOLDER PORT``. Greedy decoding with the KV cache,
one token yielded per step, so LitServe streams each token as it is made; one
worker, no batching (LitServe's OpenAISpec streams one request per worker at a time).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import litserve as ls
import torch
from litserve.specs.openai import OpenAISpec
from transformers import AutoModelForCausalLM, AutoTokenizer


class ChatLM(ls.LitAPI):
    def __init__(self, folder: str) -> None:
        super().__init__(spec=OpenAISpec())
        self.folder = folder

    def setup(self, device: str) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.model = AutoModelForCausalLM.from_pretrained(self.folder).eval()

    def predict(self, request: Any) -> Iterator[str]:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        ids = self.tokenizer(text, return_tensors="pt").input_ids
        eos = self.tokenizer.eos_token_id
        past = None
        with torch.inference_mode():
            for step in range(request.max_tokens or 16):
                out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = int(out.logits[0, -1].argmax())
                if token == eos:
                    return
                yield (" " if step else "") + str(self.tokenizer.decode([token]))
                ids = torch.tensor([[token]])


if __name__ == "__main__":
    folder, port = sys.argv[1], int(sys.argv[2])
    server = ls.LitServer(ChatLM(folder), accelerator="cpu", workers_per_device=1)
    server.run(port=port, host="127.0.0.1", generate_client_file=False, num_api_servers=1)
