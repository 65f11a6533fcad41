"""A ``text-generation`` pipeline's text as it is generated (the Hugging Face runtime's
``/generate_stream`` and ``/infer_stream``: runtimes/huggingface.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from inferd.runtimes.common import import_framework

EXTRA = "huggingface"


def generated_pieces(
    name: str, pipeline: Any, prompt: str, arguments: dict[str, Any]
) -> Iterator[str]:
    """The new text, piece by piece, from a generate() run in a thread of its own
    (the streamer hands it over); closing this generator stops that thread. What the
    pipeline raised is raised after the pieces before it."""
    transformers = import_framework("transformers", "HuggingFaceModel", EXTRA)
    stop = StopWhenClosed(import_framework("torch", "HuggingFaceModel", EXTRA))
    streamer = transformers.TextIteratorStreamer(
        pipeline.tokenizer, skip_prompt=True, skip_special_tokens=True
    )
    failures: list[Exception] = []

    def generate() -> None:
        try:
            pipeline(prompt, **arguments, streamer=streamer, stopping_criteria=[stop])
        except Exception as error:  # raised to the reader after the pieces before it
            failures.append(error)
        finally:  # generate() ends the streamer, unless it failed first: never hang the reader
            streamer.on_finalized_text("", stream_end=True)

    # A daemon: a stream nobody closed must not keep the process from exiting.
    thread = threading.Thread(target=generate, name=f"inferd-generate-{name}", daemon=True)
    thread.start()
    try:
        yield from (piece for piece in streamer if piece)  # tokens may decode to ""
    finally:  # also when the stream is closed early: stop at the next token, not the last
        stop.closed.set()
        thread.join()
    if failures:
        raise failures[0]


class StopWhenClosed:
    """A ``generate()`` stopping criterion: stop once ``closed`` is set (from another
    thread). It is checked after each new token."""

    def __init__(self, torch: ModuleType) -> None:
        self._torch = torch
        self.closed = threading.Event()

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        done = self.closed.is_set()
        torch = self._torch
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)
