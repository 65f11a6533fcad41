"""OpenAI chat streaming: time to first token and tokens/s of a tiny causal LM."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import httpx

from benchmarks.common.models import write_model_folder
from benchmarks.common.serverproc import ServerProcess
from benchmarks.common.tiny_llm import GPT2_SMALL, LmShape, save_tiny_chat_lm

from ..chatload import ChatLoad, ChatStreamError, chat_body, one_stream
from ..loadgen import Load, Target
from ..options import Options
from ..servers import (
    INFERD,
    LITSERVE,
    LITSERVE_MODEL,
    VLLM,
    VLLM_MODEL,
    Contender,
    baseline_pairs,
)
from .base import Case, Scenario, VerificationError

MODEL = "chat-lm"
LITSERVE_PYTHON_ENV = "INFERD_BENCH_LITSERVE_PYTHON"
VLLM_PYTHON_ENV = "INFERD_BENCH_VLLM_PYTHON"
PEERS = (LITSERVE, VLLM)
BATCHING_OFF = "inferd-batching-off"
VLLM_RUNTIME = "inferd-vllm"
VLLM_RUNTIME_CLASS = "inferd.runtimes.vllm.VLLMModel"
SHAPES = {"tiny": (LmShape(), 1, 256), "gpt2-small": (GPT2_SMALL, 12, 1024)}
"""--model: the LM's shape, its heads (vLLM on CPU: no head of 16) and context."""
HF = "inferd.runtimes.huggingface.HuggingFaceModel"
PROMPT = "tell me a story"
CHAT_PATH = "/v1/chat/completions"


class OpenAIChat(Scenario):
    name = "openai"
    description = """OpenAI chat streaming: TTFT, tokens/s and inter-token latency.

The tiny chat LM of benchmarks/common/tiny_llm.py (a 2-layer GPT-2, one attention
head of 32, random seeded weights, word-level tokenizer, built once into a temp
folder) served by inferd's Hugging Face runtime, and, side by side in alternating
rounds, by LitServe's OpenAISpec running the same weights through transformers
(greedy, KV cache, one worker) when --litserve-python (or
$INFERD_BENCH_LITSERVE_PYTHON) names a Python with litserve, torch and
transformers, and by vLLM's OpenAI server (python -m
vllm.entrypoints.openai.api_server, float32, its continuous batching) when
--vllm-python (or $INFERD_BENCH_VLLM_PYTHON) names a Python with vLLM (its CPU
build runs here; its attention takes no head size of 16). The load is --connections
concurrent streams of POST /v1/chat/completions (stream, temperature 0,
--max-tokens), each asking again when its stream ends (with --request-rate R:
open-loop, streams arriving at random, R a second, at most --connections at once,
each timed from its arrival); every stream is checked (200, chunks, finish_reason,
data: [DONE]). tok/s counts the tokens the usage chunk reports (text chunks where it
reports none); the p50/p99 columns are time to first token; each run's line adds
streams/s and per-stream inter-token latency, and goodput (streams a second with
time to first token under 1 s and time per output token under 100 ms). --model
gpt2-small serves a GPT-2-small-sized LM instead (12 layers, 768 wide, 124M
parameters, random weights from a config, a word-level vocabulary of 50257: no
download). --batching-off adds inferd with the Hugging Face runtime's continuous
batching off (parameters.extra.continuous_batching: false), in the same rounds;
--intra-op-threads sets inferd's torch threads. --vllm-runtime adds inferd with its
vLLM runtime (inferd.runtimes.vllm, float32, the same weights; run inferd with a
Python that has vLLM: --inferd-python), compared with vLLM's own server when
--vllm-python is given too; set VLLM_CPU_KVCACHE_SPACE for both (e.g. 1: GiB)."""
    defaults = {"duration": 10.0, "warmup": 2.0, "rounds": 2, "connections": [1, 16]}
    compares_mlserver = False
    load_tool = "chat streams"
    model = MODEL
    settings = {"debug": False}

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self._weights: Path | None = None

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--litserve-python",
            default=os.environ.get(LITSERVE_PYTHON_ENV),
            help=f"a Python with litserve, torch and transformers (or ${LITSERVE_PYTHON_ENV})",
        )
        parser.add_argument(
            "--vllm-python",
            default=os.environ.get(VLLM_PYTHON_ENV),
            help=f"a Python with vLLM, e.g. its CPU build (or ${VLLM_PYTHON_ENV})",
        )
        parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens per stream")
        parser.add_argument(
            "--request-rate",
            type=float,
            help="open-loop: streams arriving at random at this rate a second, at most "
            "--connections at once (default: closed-loop, each stream asking again)",
        )
        parser.add_argument(
            "--model", choices=sorted(SHAPES), default="tiny", help="the LM's shape"
        )
        parser.add_argument(
            "--intra-op-threads",
            type=int,
            help="inferd's torch threads (parameters.extra.intra_op_threads; default: torch's)",
        )
        parser.add_argument(
            "--vllm-runtime",
            action="store_true",
            help="add inferd with its vLLM runtime (--inferd-python must have vLLM)",
        )
        parser.add_argument(
            "--without-hf",
            action="store_true",
            help="leave out inferd's Hugging Face runtime (with --vllm-runtime and "
            "--vllm-python: the vLLM runtime against vLLM's own server alone)",
        )
        parser.add_argument(
            "--batching-off",
            action="store_true",
            help="add inferd with continuous batching off (the runtime's own loop)",
        )

    def contenders(self) -> list[Contender]:
        args = self.options.args
        contenders = [] if args.without_hf else [Contender(INFERD, INFERD)]
        if args.batching_off:
            contenders.append(Contender(BATCHING_OFF, INFERD))
        if args.vllm_runtime:
            contenders.append(Contender(VLLM_RUNTIME, INFERD))
        if args.litserve_python:
            contenders.append(Contender(LITSERVE, LITSERVE))
        if args.vllm_python:
            contenders.append(Contender(VLLM, VLLM, model=MODEL))
        if not contenders:
            raise SystemExit(
                "openai: --without-hf leaves no server to run: add --vllm-runtime, "
                "--vllm-python, --litserve-python or --batching-off"
            )
        return contenders

    def load(self, connections: int) -> Load:
        return ChatLoad(connections, self.options.args.request_rate)

    def describe(self) -> str:
        args = self.options.args
        left_out = [
            f"{name} left out (no {option})"
            for name, option, given in (
                ("LitServe", "--litserve-python", args.litserve_python),
                ("vLLM", "--vllm-python", args.vllm_python),
            )
            if not given
        ]
        described = f"{super().describe()}, model {args.model}, max_tokens {args.max_tokens}"
        return "; ".join([described, *left_out])

    def weights(self) -> Path:
        """The LM's folder, built on first use and removed at exit."""
        if self._weights is None:
            folder = Path(tempfile.mkdtemp(prefix="inferd-bench-lm-"))
            atexit.register(shutil.rmtree, folder, True)
            shape, heads, positions = SHAPES[self.options.args.model]
            save_tiny_chat_lm(folder / "weights", heads=heads, positions=positions, shape=shape)
            self._weights = folder / "weights"
        return self._weights

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        peer_folder = {LITSERVE: LITSERVE_MODEL, VLLM: VLLM_MODEL}.get(contender.kind)
        if peer_folder is not None:  # the weights folder as it is, no settings of inferd's
            (repo / peer_folder).symlink_to(self.weights(), target_is_directory=True)
            return
        if contender.label == VLLM_RUNTIME:
            engine = {"engine_args": {"dtype": "float32"}}
            parameters = {"uri": "./weights", "extra": engine}
            folder = write_model_folder(repo, MODEL, VLLM_RUNTIME_CLASS, parameters=parameters)
            (folder / "weights").symlink_to(self.weights(), target_is_directory=True)
            return
        extra: dict[str, object] = {"task": "text-generation"}
        if contender.label == BATCHING_OFF:
            extra["continuous_batching"] = False
        if self.options.args.intra_op_threads:
            extra["intra_op_threads"] = self.options.args.intra_op_threads
        folder = write_model_folder(
            repo, MODEL, HF, parameters={"uri": "./weights", "extra": extra}
        )
        (folder / "weights").symlink_to(self.weights(), target_is_directory=True)

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        url = f"{server.url}{CHAT_PATH}"
        body = chat_body(MODEL, self.options.args.max_tokens, PROMPT)
        try:
            record = asyncio.run(check_stream(url, body))
        except (ChatStreamError, httpx.HTTPError) as error:
            raise VerificationError(f"POST {url}: {error}") from None
        if len(record) > self.options.args.max_tokens:
            raise VerificationError(f"POST {url}: {len(record)} tokens past max_tokens")
        return Target(url, body)

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        peers = (*PEERS, BATCHING_OFF)
        pairs = [(INFERD, peer) for peer in peers if {INFERD, peer} <= set(labels)]
        if {VLLM_RUNTIME, VLLM} <= set(labels):
            pairs.append((VLLM_RUNTIME, VLLM))
        return pairs + baseline_pairs(labels)


async def check_stream(url: str, body: bytes) -> list[float]:
    """One stream, checked; its token arrival times."""
    async with httpx.AsyncClient(timeout=60.0) as client:
        record = await one_stream(client, url, body)
    return record.token_times
