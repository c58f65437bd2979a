"""The OpenAI API as vLLM speaks it: request parsing, response and SSE chunk shapes, errors.

Pure functions over JSON values; the HTTP handlers in `servelab.sim.serve.server` and the
response writers in `servelab.sim.serve.reply` call them.
Shapes follow vLLM 0.32.0's output (see tests/data/sim_server/*.sse): completions stream
one chunk per engine output (its tokens' text), the last one carrying `finish_reason`; chat
streams start with `delta: {"role": "assistant", "content": ""}`; with
`stream_options.include_usage` a `"choices": []` chunk with usage precedes `[DONE]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from servelab import openai_request
from servelab.openai_request import RequestError, read_flag, read_positive_int
from servelab.workload.request import ChatMessage

Kind = Literal["completion", "chat"]
JSONValue = object


class ApiError(Exception):
    """An error answered as vLLM does: HTTP `status` and `{"error": {...}}`."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.err_type,
                          "param": self.param, "code": self.status}}


def model_not_found(name: str) -> ApiError:
    return ApiError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")


@dataclass(frozen=True, slots=True)
class GenerationParams:
    """One generation request. Exactly one of `prompt_text`, `prompt_ids`, `messages` is set.

    `max_tokens` is None when the request did not say (the server applies vLLM's default).
    """

    kind: Kind
    model: str
    prompt_text: str | None
    prompt_ids: tuple[int, ...] | None
    messages: tuple[ChatMessage, ...] | None
    max_tokens: int | None
    stream: bool
    include_usage: bool
    continuous_usage: bool


def parse_json(raw: bytes) -> dict[str, object]:
    """The request body as a JSON object, or ApiError 400 naming the problem."""
    try:
        return openai_request.parse_json(raw)
    except RequestError as exc:
        raise ApiError(400, exc.message, param=exc.param) from exc


def _prompt(body: dict[str, object]) -> tuple[str | None, tuple[int, ...] | None]:
    prompts = openai_request.read_prompts(body)
    if len(prompts) > 1:  # a one-element batch is the same request; longer ones are not simulated
        raise RequestError("Batched prompts (a list of prompts) are not supported by the "
                           "simulator: send one prompt per request.", "prompt")
    return prompts[0].text, prompts[0].ids


def parse_generation(body: dict[str, object], kind: Kind) -> GenerationParams:
    """Validate a /v1/completions or /v1/chat/completions body (ApiError 400 if malformed)."""
    try:
        return _generation(body, kind)
    except RequestError as exc:
        raise ApiError(400, exc.message, param=exc.param) from exc


def _generation(body: dict[str, object], kind: Kind) -> GenerationParams:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string.", "model")
    n = body.get("n", 1)
    if n not in (1, None):
        raise RequestError(f"'n' = {n!r}: the simulator generates one choice per request.", "n")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("'stream_options' must be an object.", "stream_options")
    stream = read_flag(body, "stream")
    if kind == "chat":
        text, ids, messages = None, None, openai_request.read_messages(body)
        max_tokens = read_positive_int(body, "max_completion_tokens", "max_tokens")
    else:
        (text, ids), messages = _prompt(body), None
        max_tokens = read_positive_int(body, "max_tokens")
    return GenerationParams(
        kind=kind, model=model or "", prompt_text=text, prompt_ids=ids, messages=messages,
        max_tokens=max_tokens, stream=stream,
        include_usage=stream and read_flag(options, "include_usage"),
        continuous_usage=stream and read_flag(options, "continuous_usage_stats"),
    )


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens}


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """What every chunk and response of one request repeats."""

    kind: Kind
    response_id: str
    created: int
    model: str
    fingerprint: str

    def _object(self, streaming: bool) -> str:
        if self.kind == "chat":
            return "chat.completion.chunk" if streaming else "chat.completion"
        return "text_completion"

    def _wrap(self, choices: list[object], streaming: bool) -> dict[str, object]:
        return {"id": self.response_id, "object": self._object(streaming), "created": self.created,
                "model": self.model, "choices": choices}

    def role_chunk(self, use: dict[str, int] | None) -> dict[str, object]:
        """Chat's first chunk: the assistant role with empty content."""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        out = self._wrap([choice], True)
        if use is not None:
            out["usage"] = use
        return out

    def token_chunk(self, text: str, finish_reason: str | None,
                    use: dict[str, int] | None) -> dict[str, object]:
        """One engine output's tokens; `finish_reason` on the request's last one."""
        choice: dict[str, object]
        if self.kind == "chat":
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None,
                      "finish_reason": finish_reason, "token_ids": None}
            if finish_reason is not None:
                choice["stop_reason"] = None
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
        out = self._wrap([choice], True)
        if use is not None:
            out["usage"] = use
        return out

    def usage_chunk(self, use: dict[str, int]) -> dict[str, object]:
        """The `"choices": []` chunk sent when `stream_options.include_usage` is set."""
        out = self._wrap([], True)
        out["usage"] = use
        out["system_fingerprint"] = self.fingerprint
        return out

    def full(self, text: str, finish_reason: str | None, use: dict[str, int]) -> dict[str, object]:
        """The non-streaming response."""
        choice: dict[str, object]
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text,
                                              "reasoning_content": None, "tool_calls": []},
                      "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None, "prompt_logprobs": None}
        out = self._wrap([choice], False)
        out["usage"] = {**use, "prompt_tokens_details": None}
        out["system_fingerprint"] = self.fingerprint
        return out


def sse(payload: dict[str, object]) -> bytes:
    """One Server-Sent Event carrying `payload` as compact JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
