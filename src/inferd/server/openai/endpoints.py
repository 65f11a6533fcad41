"""The OpenAI-compatible routes on the REST port: ``GET /v1/models[/{model}]``,
``POST /v1/completions``, ``/v1/chat/completions`` and ``/v1/embeddings``.

Each is an ASGI endpoint of its Starlette route (routes.API_ROUTES, server/rest/api.py)
that goes through the REST edge as ``/infer`` does: the body read within
``max_request_size``, the request's context, then ``DataPlane.infer_stream``
(completions: one stream per choice) or ``DataPlane.infer`` (embeddings), so the
queue bound, workers, protocol processes and the model host hold. The runtime side
is inferd/generation.py. Access is checked here, not by the route's middleware, so
that a refusal is in OpenAI's shape and ``Authorization: Bearer <key>`` is
accepted as the key of a restricted group (server/access.py ``check_bearer``).

A client that leaves cancels the work (``run_until_disconnect``): a stream's
generator is closed, and the model's generation stops at its next token.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from inferd.errors import InvalidParameter, InvalidRequest, ModelNotFound
from inferd.generation import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    GenerationRequest,
    TextPiece,
    generation_request,
    read_embeddings,
    read_piece,
)
from inferd.server.access import check_bearer
from inferd.server.openai import wire
from inferd.server.openai.answers import (
    DONE,
    Choice,
    Completion,
    embeddings_answer,
    model_entry,
    models_answer,
    shortened,
)
from inferd.server.openai.calls import Call, ChoiceChunks
from inferd.server.rest.codec import JSON_CONTENT_TYPE
from inferd.server.rest.edge import RestEdge
from inferd.server.rest.fastpath import Receive, Scope, Send, send_whole
from inferd.server.rest.sse import run_until_disconnect
from inferd.server.routes import INFERENCE, METADATA
from inferd.types import ModelState

if TYPE_CHECKING:
    from inferd.context import RequestContext
    from inferd.observability.stats import ModelStats

_JSON_TYPE = (b"content-type", JSON_CONTENT_TYPE.encode())
_WHAT = {COMPLETIONS: "completions", CHAT: "chat completions", EMBEDDINGS: "embeddings"}
Handler = Callable[[Call], Awaitable[None]]


class OpenAIEndpoints:
    """The endpoints, by the handler names of routes.API_ROUTES."""

    def __init__(self, edge: RestEdge) -> None:
        self.edge = edge
        self.dataplane = edge.dataplane
        self.created = int(time.time())

    def endpoints(self) -> dict[str, _Endpoint]:
        return {
            "openai_models": _Endpoint(self, METADATA, "listing models", self.models),
            "openai_model": _Endpoint(self, METADATA, "retrieving a model", self.model),
            "openai_completions": _Endpoint(self, INFERENCE, "a completion", self.completions),
            "openai_chat_completions": _Endpoint(self, INFERENCE, "a chat completion", self.chat),
            "openai_embeddings": _Endpoint(self, INFERENCE, "embeddings", self.embeddings),
        }

    # Models

    def served(self) -> dict[str, tuple[str, ...]]:
        """Each ready model that answers an OpenAI-compatible endpoint, and which."""
        found: dict[str, tuple[str, ...]] = {}
        for version in self.dataplane.registry.versions():
            instance = version.instance
            if version.state is ModelState.READY and instance and instance.openai_endpoints:
                found.setdefault(version.name, instance.openai_endpoints)
        for adapter, base in self._adapters().items():  # a model's own name wins
            found.setdefault(adapter, tuple(k for k in found[base] if k != EMBEDDINGS))
        return found

    def _adapters(self) -> dict[str, str]:
        """Each LoRA adapter of a ready model (GenerationRequest.adapter), and its model:
        a model of its own name for completions and chat completions."""
        adapters: dict[str, str] = {}
        for version in self.dataplane.registry.versions():
            instance = version.instance
            if version.state is ModelState.READY and instance and instance.openai_endpoints:
                for adapter in instance.openai_adapters:
                    adapters.setdefault(adapter, version.name)
        return adapters

    def _model_of(self, name: str) -> tuple[str, str | None]:
        """The model ``name`` runs on, and the adapter it names, if it is an adapter's
        and no model's name."""
        if any(version.name == name for version in self.dataplane.registry.versions()):
            return name, None
        base = self._adapters().get(name)
        return (name, None) if base is None else (base, name)

    def _check_serves(self, name: str, kind: str) -> str | None:
        """The version of ``name`` that answers (ModelNotFound, ModelNotReady, or a 400
        when it does not serve ``kind``)."""
        found = self.dataplane.registry.get_ready(name, None)
        assert found.instance is not None
        if kind not in found.instance.openai_endpoints:
            served = ", ".join(_WHAT[k] for k in found.instance.openai_endpoints) or "none"
            raise InvalidParameter(
                f"Model {name!r} does not serve {_WHAT[kind]} (it serves: {served})", "model"
            )
        return found.version

    async def models(self, call: Call) -> None:
        entries = [model_entry(name, self.created) for name in sorted(self.served())]
        await send_whole(call.send, 200, [_JSON_TYPE], models_answer(entries))

    async def model(self, call: Call) -> None:
        name = call.scope["path_params"]["model"]
        if name not in self.served():
            raise ModelNotFound(name, hint=" (GET /v1/models lists the models served here)")
        body = msgspec.json.encode(model_entry(name, self.created))
        await send_whole(call.send, 200, [_JSON_TYPE], body)

    # Completions

    async def completions(self, call: Call) -> None:
        body = wire.decode(await self._body(call), wire.CompletionBody)
        calls = wire.completion_calls(body)
        await self._complete(call, body, calls, wire.model_of(body), COMPLETIONS)

    async def chat(self, call: Call) -> None:
        body = wire.decode(await self._body(call), wire.ChatCompletionBody)
        await self._complete(call, body, [wire.chat_call(body)], wire.model_of(body), CHAT)

    async def _complete(
        self,
        call: Call,
        body: wire.CompletionBody | wire.ChatCompletionBody,
        prompts: list[GenerationRequest],
        name: str,
        kind: str,
    ) -> None:
        n, usage_chunk = wire.choices(body), wire.include_usage(body)
        name, adapter = self._model_of(name)
        version = self._check_serves(name, kind)
        runs = [_seeded(prompt, j, adapter) for prompt in prompts for j in range(n)]
        stats = self.dataplane.model_stats.of(name, version)
        single = isinstance(body, wire.ChatCompletionBody) and body.parallel_tool_calls is False
        answer = Completion(name, chat=kind == CHAT, n=n, single_call=single)
        # A context (and trace) per choice: each is a request of its own to the core.
        contexts = [self.edge.context(name, None, call.headers, None) for _ in runs]
        if body.stream:
            work = self._stream(call, answer, stats, runs, contexts, usage_chunk)
        else:
            work = self._whole(call, answer, stats, runs, contexts)
        try:
            await run_until_disconnect(work, call.receive)
        except InvalidParameter as error:
            raise wire.as_sent(error, body) from None
        finally:  # what was generated counts, answered or not
            stats.tokens(answer.usage.prompt_tokens, answer.usage.completion_tokens)

    async def _whole(
        self,
        call: Call,
        answer: Completion,
        stats: ModelStats,
        runs: list[GenerationRequest],
        contexts: list[RequestContext],
    ) -> None:
        choices = [_choice(answer, index, run) for index, run in enumerate(runs)]
        # Concurrently: the queue and the model's slots decide how many run at once.
        tasks = [
            asyncio.ensure_future(self._generate(answer, stats, run, choice, context))
            for run, choice, context in zip(runs, choices, contexts, strict=True)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:  # one failed: the others stop too
            for task in tasks:
                task.cancel()
        headers = self.edge.response_headers(contexts[0], [_JSON_TYPE])
        await send_whole(call.send, 200, headers, answer.whole(choices, answer.usage))

    async def _generate(
        self,
        answer: Completion,
        stats: ModelStats,
        run: GenerationRequest,
        choice: Choice,
        context: RequestContext,
        on_text: Callable[[list[TextPiece]], Awaitable[None]] | None = None,
    ) -> None:
        """Run one choice to its end, noting its text, log probabilities, finish and
        usage (added to the answer's) and its token timings; ``on_text`` gets the new
        pieces as soon as they are ready (a stream)."""
        request = generation_request(run)
        responses = self.dataplane.infer_stream(answer.model, None, request, context)
        pieces, counted, last = 0, False, None
        started = previous = time.perf_counter_ns()
        async with contextlib.aclosing(responses):
            async for ready in responses:
                texts, new = [], []
                for last in ready:
                    piece = read_piece(last)
                    if piece.text:
                        texts.append(piece.text)
                    if piece.text or piece.logprobs:
                        new.append(piece)
                    if choice.logprobs is not None and piece.logprobs:
                        choice.logprobs += piece.logprobs
                    counted |= _note_end(choice, piece)
                if texts:  # a piece of text is a token (the HF runtime's and most runtimes')
                    now = time.perf_counter_ns()
                    # The first token's wait is the time to first token, not a gap.
                    gaps = len(texts) - 1 if pieces == 0 else len(texts)
                    if gaps:
                        stats.tokens_came(gaps, now - previous if pieces else 0)
                    pieces, previous = pieces + len(texts), now
                choice.text += texts
                if on_text is not None and new:
                    await on_text(new)
        if not counted:  # the runtime did not count: a token per piece of text
            choice.usage.completion_tokens = pieces
        stats.completion_ended(choice.usage.completion_tokens, previous - started)
        if last is not None:
            self.edge.traced(context, last)
        answer.ended(choice)

    async def _stream(
        self,
        call: Call,
        answer: Completion,
        stats: ModelStats,
        runs: list[GenerationRequest],
        contexts: list[RequestContext],
        include_usage: bool,
    ) -> None:
        """The choices one after another (each chunk names its choice), each piece
        sent as soon as it is made. The answer starts with the first piece, so an
        error before it is an ordinary error answer."""
        for index, (run, context) in enumerate(zip(runs, contexts, strict=True)):
            chunks = ChoiceChunks(call, answer, _choice(answer, index, run), context, include_usage)
            await self._generate(answer, stats, run, chunks.choice, context, chunks.send_text)
            await chunks.end()
        if include_usage:
            await call.chunk(answer.usage_chunk(answer.usage))
        await call.chunk(DONE)
        await call.send({"type": "http.response.body", "body": b""})

    # Embeddings

    async def embeddings(self, call: Call) -> None:
        body = wire.decode(await self._body(call), wire.EmbeddingBody)
        name = wire.model_of(body)
        request = wire.embedding_call(body)
        base, adapter = self._model_of(name)
        if adapter is not None:
            raise InvalidParameter(
                f"Model {name!r} is a LoRA adapter of {base!r}: it serves completions and "
                "chat completions, not embeddings",
                "model",
            )
        self._check_serves(name, EMBEDDINGS)
        context = self.edge.context(name, None, call.headers, call.receive)
        response = await self.dataplane.infer(name, None, generation_request(request), context)
        self.edge.traced(context, response)
        embeddings = read_embeddings(response)
        if len(embeddings.vectors) != len(request.texts):
            raise InvalidRequest(
                f"Model {name!r} answered {len(embeddings.vectors)} vectors for "
                f"{len(request.texts)} texts"
            )
        vectors = shortened(name, embeddings.vectors, request.dimensions)
        content = embeddings_answer(name, vectors, embeddings.prompt_tokens, body.encoding_format)
        await send_whole(call.send, 200, self.edge.response_headers(context, [_JSON_TYPE]), content)

    async def _body(self, call: Call) -> bytes:
        return await self.edge.read_body(call.headers, call.receive)


class _Endpoint:
    """One route's ASGI endpoint: access (the group's guard, a Bearer key accepted),
    then its handler; whatever it raises answered in OpenAI's shape."""

    # server/rest/api.py: no guard middleware in front, this checks access itself.
    checks_access = True

    def __init__(self, owner: OpenAIEndpoints, group: str, what: str, handler: Handler) -> None:
        self.owner = owner
        self.group = group
        self.what = what
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = Call(scope, receive, send, self.what)
        try:
            check_bearer(self.owner.edge.guard(self.group), call.headers)
            await self.handler(call)
        except Exception as error:
            await call.fail(error)


def _note_end(choice: Choice, piece: TextPiece) -> bool:
    """Note what a piece says of its choice's end; whether it counted the tokens."""
    if piece.finish_reason is not None:
        choice.finish_reason = piece.finish_reason
    if piece.prompt_tokens is not None:
        choice.usage.prompt_tokens = piece.prompt_tokens
    if piece.completion_tokens is not None:
        choice.usage.completion_tokens = piece.completion_tokens
        return True
    return False


def _choice(answer: Completion, index: int, run: GenerationRequest) -> Choice:
    return answer.choice(
        index,
        logprobs=run.logprobs is not None,
        tools=run.tools is not None,
        offset=len(run.prompt or ""),
    )


def _seeded(run: GenerationRequest, choice: int, adapter: str | None) -> GenerationRequest:
    """The ``choice``-th choice of a prompt: its own seed (``seed + choice``), so that
    the choices differ and each is reproducible; on ``adapter``, when /v1's ``model``
    named one."""
    seed = run.seed if choice == 0 or run.seed is None else run.seed + choice
    if seed == run.seed and adapter is None:
        return run
    return msgspec.structs.replace(run, seed=seed, adapter=adapter)
