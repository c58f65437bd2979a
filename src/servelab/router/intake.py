"""From an incoming OpenAI request to what routing needs: the body is parsed once for
validation and for the few fields policies read; it is forwarded as the original bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass

from servelab.router.records import RouteRequest


class BadRequest(Exception):
    """The client's request is malformed; the message says what is wrong (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Intake:
    """The parsed essentials of one request."""

    route: RouteRequest
    stream: bool


def _text(value: object) -> str:
    """Prompt text from a completions `prompt` or a chat `content`: a string, a list of
    token ids, a list of strings or token-id lists (a batch), or a list of content parts."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return ""
    if all(isinstance(v, int) for v in value):
        return " ".join(map(str, value))
    return "\n".join(
        str(v.get("text", "")) if isinstance(v, dict) else _text(v) for v in value
    )


def parse_body(body: bytes, chat: bool, session_header: str | None) -> Intake:
    """Validate the JSON body and extract the routing fields; raise BadRequest naming the
    problem."""
    try:
        obj = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("request body must be a JSON object")
    if chat:
        messages = obj.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        prompt = "\n".join(
            _text(m.get("content")) if isinstance(m, dict) else "" for m in messages
        )
    else:
        if "prompt" not in obj:
            raise BadRequest("'prompt' is required")
        prompt = _text(obj["prompt"])
    user = obj.get("user")
    session = session_header or (user if isinstance(user, str) and user else None)
    stream = obj.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false")
    return Intake(RouteRequest(prompt, len(prompt), session), stream)
