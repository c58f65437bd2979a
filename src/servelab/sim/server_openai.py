"""The OpenAI API as vLLM speaks it: request parsing, response and SSE chunk shapes, errors.

Pure functions over JSON values; the HTTP handlers in `servelab.sim.server` and the
response writers in `server_reply` call them.
Shapes follow vLLM 0.32.0's output (see tests/data/sim_server/*.sse): completions stream
one chunk per engine output (its tokens' text), the last one carrying `finish_reason`; chat
streams start with `delta: {"role": "assistant", "content": ""}`; with
`stream_options.include_usage` a `"choices": []` chunk with usage precedes `[DONE]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

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
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _int_list(value: list[object]) -> tuple[int, ...] | None:
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return tuple(v for v in value if isinstance(v, int))
    return None


def _prompt(value: object) -> tuple[str | None, tuple[int, ...] | None]:
    if isinstance(value, str):
        return value, None
    if isinstance(value, list):
        # A one-element batch is the same request; longer batches are not simulated.
        if len(value) == 1 and isinstance(value[0], (str, list)):
            return _prompt(value[0])
        ids = _int_list(value)
        if ids is not None and ids:
            return None, ids
        if value and all(isinstance(v, (str, list)) for v in value):
            raise ApiError(400, "Batched prompts (a list of prompts) are not supported by the "
                                "simulator: send one prompt per request.", param="prompt")
    raise ApiError(400, "'prompt' must be a string or a non-empty list of token ids.", param="prompt")


def _content(value: object, index: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts):
            return "".join(p for p in parts if isinstance(p, str))
    if value is None:
        return ""
    raise ApiError(400, f"messages[{index}].content must be a string or a list of text parts.",
                   param="messages")


def _messages(value: object) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "'messages' must be a non-empty list.", param="messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a 'role'.", param="messages")
        out.append(ChatMessage(str(m["role"]), _content(m.get("content"), i)))
    return tuple(out)


def _opt_int(body: dict[str, object], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ApiError(400, f"'{name}' must be an integer >= 1 (got {value!r}).", param=name)
        return value
    return None


def _flag(obj: dict[str, object], name: str) -> bool:
    value = obj.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be true or false (got {value!r}).", param=name)
    return value


def parse_generation(body: dict[str, object], kind: Kind) -> GenerationParams:
    """Validate a /v1/completions or /v1/chat/completions body (ApiError 400 if malformed)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "'model' must be a string.", param="model")
    n = body.get("n", 1)
    if n not in (1, None):
        raise ApiError(400, f"'n' = {n!r}: the simulator generates one choice per request.", param="n")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object.", param="stream_options")
    stream = _flag(body, "stream")
    if kind == "chat":
        text, ids, messages = None, None, _messages(body.get("messages"))
        max_tokens = _opt_int(body, "max_completion_tokens", "max_tokens")
    else:
        if "prompt" not in body:
            raise ApiError(400, "'prompt' is required.", param="prompt")
        (text, ids), messages = _prompt(body["prompt"]), None
        max_tokens = _opt_int(body, "max_tokens")
    return GenerationParams(
        kind=kind, model=model or "", prompt_text=text, prompt_ids=ids, messages=messages,
        max_tokens=max_tokens, stream=stream,
        include_usage=stream and _flag(options, "include_usage"),
        continuous_usage=stream and _flag(options, "continuous_usage_stats"),
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
