"""What one answer of the token server says: its length, its text, its usage, its bytes.

`token_server` decides when bytes leave (the schedule, the faults, the measured truth);
this module decides what they are. Kept apart so the timing loop reads without the wire
format in the way, and so the content is a pure function of the request and the server's
settings: each answer builds its own `StreamEvents`, nothing here outlives a request.

The content is chosen to be checkable, not realistic: token i of an answer is the text
` t{i}`, and a prompt counts one token per whitespace-separated word (no tokenizer, so a
client's counts can be compared exactly). Follows vLLM's stream format: compact JSON, a
chat stream opens with a role-only delta, `stream_options.include_usage` adds a final
`choices: []` chunk with usage, `continuous_usage_stats` puts the running usage in every
chunk. `max_completion_tokens` / `max_tokens` set the output length; without `ignore_eos`
the answer stops after `eos_after` tokens when that is set.
"""

from __future__ import annotations

import json

from servelab.openai_request import RequestError, prompt_text

# The stream's terminator, as vLLM sends it (after the usage chunk, if any).
DONE = b"data: [DONE]\n\n"


def count_prompt_tokens(body: dict) -> int:
    """Prompt length in tokens: words of the prompt, or of all chat messages' contents (a
    body the reader refuses counts 0: this server answers anything)."""
    try:
        return len(prompt_text(body, chat="messages" in body).split())
    except RequestError:
        return 0


def count_output_tokens(body: dict, eos_after: int | None) -> int:
    """How many tokens the answer carries (16, the OpenAI completions default, if unset)."""
    n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
    if eos_after is not None and not body.get("ignore_eos"):
        n = min(n, eos_after)
    return n


class StreamEvents:
    """Builds the SSE bytes of one streamed response in vLLM's compact format."""

    def __init__(
        self, model: str, reasoning_tokens: int, chat: bool, prompt_tokens: int, options: dict
    ) -> None:
        self.reasoning_tokens = reasoning_tokens
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        # The request's `stream_options` shape the bytes, so they are read here, not by
        # the server; the server only asks whether to send the closing usage chunk.
        self.continuous = bool(options.get("continuous_usage_stats"))
        self.include_usage = bool(options.get("include_usage"))
        self.head = {
            "id": "cmpl-token-server",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 0,
            "model": model,
        }

    def _event(self, obj: dict) -> bytes:
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def _usage(self, completion: int) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
        }

    def role(self) -> bytes:
        """The chat stream's opening, role-only delta."""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        obj = {**self.head, "choices": [choice]}
        if self.continuous:
            obj["usage"] = self._usage(0)
        return self._event(obj)

    def tokens(self, first: int, k: int, cum: int, finish: str | None) -> bytes:
        """One chunk: tokens `first` .. `first + k - 1`, `cum` sent once it is written."""
        text = "".join(f" t{i}" for i in range(first, first + k))
        if self.chat:
            key = "reasoning_content" if first < self.reasoning_tokens else "content"
            choice = {"index": 0, "delta": {key: text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = {**self.head, "choices": [choice]}
        if self.continuous:
            obj["usage"] = self._usage(cum)
        return self._event(obj)

    def usage(self, n: int) -> bytes:
        """The closing `choices: []` chunk that `include_usage` asks for."""
        return self._event({**self.head, "choices": [], "usage": self._usage(n)})


def whole_answer(model: str, chat: bool, n: int, prompt_tokens: int) -> dict:
    """The non-streaming answer's JSON object."""
    text = "".join(f" t{i}" for i in range(n))
    if chat:
        choice: dict = {"index": 0, "message": {"role": "assistant", "content": text}}
    else:
        choice = {"index": 0, "text": text}
    choice["finish_reason"] = "length"
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
    return {"id": "cmpl-token-server", "object": "text_completion", "model": model,
            "choices": [choice], "usage": usage}
