"""oneDNN matrix products for a Hugging Face model's linear layers on CPU.

PyTorch runs a float32 ``nn.Linear`` (and GPT-2's ``Conv1D``) through MKL's sgemm,
which on an AMD CPU takes its AVX2 path; oneDNN's linear (the kernel vLLM's CPU
build uses) takes AVX-512 where the CPU has it. Measured on the benchmarks'
2-core AMD EPYC, one thread, GPT-2-small's shapes at 16 rows (a decode step of
16 sequences): x0.6 the CPU of a layer's product and x0.55 the output layer's;
at one row they are alike, and a whole decode step of the continuous batching
engine took x0.8 the CPU (the rest: attention, the cache's gathers).

Each such layer of a float32 CPU model then computes with
``torch.ops.mkldnn._linear_pointwise`` on its own weight (no copy, no other
memory), the layer's own forward still taking what oneDNN would not: a
gradient to record, another dtype. The op is one of PyTorch's internal ones
(what its compiler emits for CPU linears): where it is missing or does not give
the layer's own answer on a trial input, the model is left as it was.
``parameters.extra.onednn_linear: false`` leaves it as it is anyway (a CPU whose
MKL path is the faster one).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

SETTING = "onednn_linear"


def apply_setting(torch: ModuleType, name: str, extra: dict[str, Any], model: Any) -> None:
    """Route a ``text-generation`` model's linear layers through oneDNN unless
    ``parameters.extra.onednn_linear`` is false (a true or false, else ValueError)."""
    wanted = extra.get(SETTING, True)
    if not isinstance(wanted, bool):
        raise ValueError(
            f"Model {name!r}: parameters.extra.{SETTING} must be true or false, not {wanted!r}"
        )
    if wanted and extra.get("task") == "text-generation":
        layers = use_onednn_linears(torch, model)
        if layers:
            logger.info("Model %r: %d linear layers compute with oneDNN", name, layers)


def use_onednn_linears(torch: ModuleType, model: Any) -> int:
    """Route ``model``'s float32 linear layers through oneDNN (see the module's
    docstring); returns how many now are, 0 where nothing changed."""
    linear = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if linear is None or not torch.backends.mkldnn.is_available():
        return 0
    found = ((module, _weight(torch, module)) for module in model.modules())
    layers = [(module, weight) for module, weight in found if weight is not None]
    if not layers or not _agrees(torch, linear, *layers[0]):
        return 0
    for module, weight in layers:
        module.forward = _forward(torch, linear, module, weight)
    return len(layers)


def _weight(torch: ModuleType, module: Any) -> Any:
    """The layer's weight as ``[out, in]`` (a view: GPT-2's ``Conv1D`` keeps it
    transposed), for a float32 CPU ``nn.Linear`` or ``Conv1D``; None for the rest."""
    kind = type(module)
    if hasattr(module, "_hf_hook"):  # accelerate's (offloading, device maps): its own forward
        return None
    if kind is torch.nn.Linear:
        weight = module.weight
    elif kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers."):
        weight = module.weight.t()
    else:
        return None
    if weight.dtype != torch.float32 or weight.device.type != "cpu" or weight.dim() != 2:
        return None
    return weight


def _forward(torch: ModuleType, linear: Any, module: Any, weight: Any) -> Any:
    original = module.forward
    transposed = weight is not module.weight  # Conv1D: read again at each call, as its
    # own forward does (a weight assigned anew is the one used)

    def forward(x: Any) -> Any:
        weight = module.weight.t() if transposed else module.weight
        if x.dtype != weight.dtype or (torch.is_grad_enabled() and weight.requires_grad):
            return original(x)
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        out = linear(rows, weight, module.bias, "none", [], "")
        return out.view(*x.shape[:-1], weight.shape[0])

    return forward


def _agrees(torch: ModuleType, linear: Any, module: Any, weight: Any) -> bool:
    """Whether oneDNN's product is the layer's own on a trial input."""
    try:
        with torch.no_grad():
            seeded = torch.Generator().manual_seed(0)  # the process's own seed untouched
            trial = torch.randn(3, weight.shape[1], generator=seeded)
            ours = linear(trial, weight, module.bias, "none", [], "")
            agrees = bool(torch.allclose(ours, module(trial), rtol=1e-4, atol=1e-4))
    except (RuntimeError, TypeError) as error:  # an older PyTorch's signature, a build without
        logger.info("oneDNN linear layers not used: %s", error)
        return False
    if not agrees:
        logger.info("oneDNN linear layers not used: they differ from PyTorch's own")
    return agrees
