"""Request bodies for each backend: what `servelab bench --backend` sends and where.

| backend | endpoint | body |
|---|---|---|
| `openai` | /v1/completions | prompt, max_tokens, repetition_penalty 1.0, stream, stream_options.include_usage |
| `openai-chat` | /v1/chat/completions | messages, max_completion_tokens, stream, include_usage |
| `vllm` | /v1/completions | openai's, plus ignore_eos, continuous_usage_stats |
| `sglang` | /v1/completions | openai's, plus ignore_eos, continuous_usage_stats |

Sampling parameters are sent only when given (`SamplingParams`, `vllm bench serve`'s
`--temperature`, `--top-p`, ... flags): otherwise the server applies its own default, which
for vLLM is the model's generation_config (Qwen3: temperature 0.6, top-k 20, top-p 0.95).
That is what `vllm bench serve` does since it stopped sending temperature 0, and it is not
free: on one H200, greedy requests ran Qwen3-14B's decode steps ~3.5 % faster than the
default top-k/top-p sampling (docs/validation/h200x2-2026-11-30). One exception, as
vllm bench serve: completions bodies always carry `repetition_penalty: 1.0`.

`continuous_usage_stats` makes the server put the running `completion_tokens` in every
chunk, so the client knows how many tokens each chunk carried (see `tally.py`); plain
OpenAI servers reject unknown fields, so `openai`/`openai-chat` only ask for the final
usage and send `ignore_eos` only when `--ignore-eos` is given. Chat requests sent to a
completions backend are flattened (turns joined by newlines), and completions prompts sent
to a chat backend become one user turn. A request's images (`random-mm`) become content
parts of the last user turn; a completions backend refuses them (ServelabError).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from servelab.errors import ServelabError
from servelab.workload.request import RequestSpec


class SamplingParams(BaseModel):
    """Sampling fields added to every request body; None: not sent (the server's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = Field(None, gt=0)

    def fields(self) -> dict[str, float | int]:
        """The set fields, in vLLM bench serve's order (what goes into the body)."""
        return self.model_dump(exclude_none=True)


@dataclass(frozen=True, slots=True)
class Backend:
    """How one backend family is spoken to.

    `chat` selects the chat API's body; `engine_extras` adds the vLLM/SGLang sampling
    extras (`ignore_eos` always sent, continuous usage stats asked for).
    """

    name: str
    default_endpoint: str
    chat: bool
    engine_extras: bool

    def check_sendable(self, specs: Sequence[RequestSpec]) -> None:
        """Refuse (ServelabError) requests this backend cannot carry: images need chat."""
        if not self.chat:
            with_images = next((s for s in specs if s.images), None)
            if with_images is not None:
                raise ServelabError(
                    f"--backend {self.name}: request {with_images.index} carries images, which "
                    "only a chat backend can send (use --backend openai-chat)")

    def body(self, spec: RequestSpec, model: str, ignore_eos: bool,
             sampling: SamplingParams | None = None, *, logprobs: int | None = None,
             extra_body: Mapping[str, object] | None = None) -> bytes:
        """The JSON body (bytes) for one streaming request; built before the run starts.

        `logprobs` asks for that many log-probabilities per token (`--logprobs`);
        `extra_body` (`--extra-body`) is merged last, so it overrides any field, as
        vLLM's does.
        """
        payload: dict[str, object] = {"model": model, "stream": True}
        if self.chat:
            if spec.messages is not None:
                messages: list[dict[str, object]] = [
                    {"role": m.role, "content": m.content} for m in spec.messages]
            else:
                messages = [{"role": "user", "content": spec.prompt}]
            if spec.images:
                # OpenAI's content parts, text first then the images, as vllm bench serve sends them.
                last = messages[-1]
                last["content"] = [{"type": "text", "text": last["content"]}] + [
                    {"type": "image_url", "image_url": {"url": url}} for url in spec.images]
            payload["messages"] = messages
            payload["max_completion_tokens"] = spec.output_len
        elif spec.images:
            self.check_sendable((spec,))
        else:
            payload["prompt"] = spec.text
            payload["max_tokens"] = spec.output_len
            # vllm bench serve's completions requests always carry it, which overrides a
            # generation_config's penalty; --repetition-penalty / --extra-body replace it.
            payload["repetition_penalty"] = 1.0
        if sampling is not None:
            payload.update(sampling.fields())
        if self.engine_extras:
            payload["ignore_eos"] = ignore_eos
            payload["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        else:
            if ignore_eos:
                payload["ignore_eos"] = True
            payload["stream_options"] = {"include_usage": True}
        if logprobs is not None and not self.chat:
            # As vllm bench serve: completions only (its chat requests never ask for them).
            payload["logprobs"] = logprobs
        if extra_body:
            payload.update(extra_body)
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


BACKENDS: dict[str, Backend] = {
    "openai": Backend("openai", "/v1/completions", chat=False, engine_extras=False),
    "openai-chat": Backend("openai-chat", "/v1/chat/completions", chat=True, engine_extras=False),
    "vllm": Backend("vllm", "/v1/completions", chat=False, engine_extras=True),
    "sglang": Backend("sglang", "/v1/completions", chat=False, engine_extras=True),
}


def get_backend(name: str) -> Backend:
    """The backend called `name`; a ServelabError naming the choices otherwise."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ServelabError(
            f"--backend {name!r} is not known; choose one of: {', '.join(BACKENDS)}"
        ) from None
