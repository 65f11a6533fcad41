"""oneDNN linear layers for a Hugging Face text-generation model on CPU
(runtimes/huggingface_onednn.py): the same answers, the setting that turns them off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferd.runtimes.huggingface import HuggingFaceModel
from inferd.runtimes.huggingface_onednn import apply_setting, use_onednn_linears
from tests.frameworks import require_module
from tests.support.tiny_llm import save_tiny_chat_lm

from .runtime_helpers import load, model_settings

torch = require_module("torch", "huggingface")
transformers = require_module("transformers", "huggingface")

IMPLEMENTATION = "inferd.runtimes.huggingface.HuggingFaceModel"
GENERATION = {"task": "text-generation"}
ONEDNN = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
needs_onednn = pytest.mark.skipif(
    ONEDNN is None or not torch.backends.mkldnn.is_available(), reason="PyTorch without oneDNN"
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lm")
    save_tiny_chat_lm(folder)  # a 2-layer GPT-2: Conv1D layers and a Linear output layer
    return folder


def lm(folder: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()


def routed(model: Any) -> list[str]:
    """The names of the layers whose forward is oneDNN's."""
    return [name for name, module in model.named_modules() if "forward" in vars(module)]


def logits(model: Any, ids: Any) -> Any:
    with torch.no_grad():
        return model(ids).logits


@needs_onednn
def test_every_linear_layer_gives_the_same_logits_through_onednn(folder: Path) -> None:
    model = lm(folder)
    seeded = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=seeded)
    before = logits(model, ids)
    layers = use_onednn_linears(torch, model)
    assert layers == 2 * 4 + 1  # per block: attention in and out, MLP in and out; the head
    assert len(routed(model)) == layers
    assert torch.allclose(logits(model, ids), before, rtol=1e-4, atol=1e-5)
    # With a gradient to record, the layers' own forward runs, and it is recorded.
    model(ids).logits.sum().backward()
    assert model.lm_head.weight.grad is not None


def test_a_float64_model_is_left_as_it_is(folder: Path) -> None:
    model = lm(folder).double()
    assert use_onednn_linears(torch, model) == 0
    assert routed(model) == []


@needs_onednn
def test_the_setting_turns_it_off_and_only_generation_uses_it(folder: Path) -> None:
    def applied(extra: dict[str, Any]) -> list[str]:
        model = lm(folder)
        apply_setting(torch, "lm", extra, model)
        return routed(model)

    assert applied(GENERATION)
    assert applied({**GENERATION, "onednn_linear": False}) == []
    assert applied({"task": "feature-extraction"}) == []


@pytest.mark.parametrize("value", ["false", 0, None])
def test_the_setting_must_be_true_or_false(folder: Path, value: Any) -> None:
    with pytest.raises(ValueError, match="onednn_linear must be true or false"):
        apply_setting(torch, "lm", {**GENERATION, "onednn_linear": value}, lm(folder))


@needs_onednn
def test_the_runtime_routes_a_generation_model_unless_told_not_to(folder: Path) -> None:
    def served(extra: dict[str, Any]) -> Any:
        parameters = {"uri": str(folder), "extra": {**GENERATION, **extra}}
        runtime = load(HuggingFaceModel, model_settings(folder, IMPLEMENTATION, parameters))
        return runtime._pipeline.model

    assert routed(served({}))
    assert routed(served({"onednn_linear": False})) == []
