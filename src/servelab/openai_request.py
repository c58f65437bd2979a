"""What a client's OpenAI completions or chat request body asks for: the one reader of it.

The router routes on the prompt, the simulator's server answers the request, the test token
server counts its words; all three read bodies through these functions, so a body means the
same thing to each. Errors are `RequestError`s naming the field (`param`); each server turns
them into its own HTTP 400 reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from servelab.workload.request import ChatMessage


class RequestError(ValueError):
    """The body is malformed: `message` says how, `param` names the field (None: the body)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class Prompt:
    """One completions prompt: exactly one of `text` and `ids` is set."""

    text: str | None
    ids: tuple[int, ...] | None

    def as_text(self) -> str:
        """The prompt as text (token ids joined by spaces), what routing and counting read."""
        return self.text if self.text is not None else " ".join(map(str, self.ids or ()))


def parse_json(raw: bytes) -> dict[str, object]:
    """The request body as a JSON object."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    return body


def _int_list(value: list[object]) -> tuple[int, ...] | None:
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return tuple(v for v in value if isinstance(v, int))
    return None


def _one_prompt(value: object) -> Prompt | None:
    if isinstance(value, str):
        return Prompt(value, None)
    if isinstance(value, list) and value:
        ids = _int_list(value)
        if ids is not None:
            return Prompt(None, ids)
    return None


def read_prompts(body: dict[str, object]) -> tuple[Prompt, ...]:
    """The completions `prompt`: a string or token ids, or a batch (a list of those)."""
    if "prompt" not in body:
        raise RequestError("'prompt' is required.", "prompt")
    value = body["prompt"]
    one = _one_prompt(value)
    if one is not None:
        return (one,)
    if isinstance(value, list) and value:
        batch = [_one_prompt(v) for v in value]
        if all(p is not None for p in batch):
            return tuple(p for p in batch if p is not None)
    raise RequestError("'prompt' must be a string, a non-empty list of token ids, or a list of "
                       "those.", "prompt")


def _content(value: object, index: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        # text parts joined; other parts (images, audio) carry no prompt text
        parts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts):
            return "".join(p for p in parts if isinstance(p, str))
    if value is None:
        return ""
    raise RequestError(f"messages[{index}].content must be a string or a list of text parts.",
                       "messages")


def read_messages(body: dict[str, object]) -> tuple[ChatMessage, ...]:
    """The chat `messages`: a non-empty list of {role, content} (content text or text parts)."""
    value = body.get("messages")
    if not isinstance(value, list) or not value:
        raise RequestError("'messages' must be a non-empty list.", "messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a 'role'.", "messages")
        out.append(ChatMessage(str(m["role"]), _content(m.get("content"), i)))
    return tuple(out)


def read_flag(obj: dict[str, object], name: str) -> bool:
    """A boolean field (absent or null: false)."""
    value = obj.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"'{name}' must be true or false (got {value!r}).", name)
    return value


def read_positive_int(body: dict[str, object], *names: str) -> int | None:
    """The first of `names` that is set, an integer >= 1 (None when none is set)."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RequestError(f"'{name}' must be an integer >= 1 (got {value!r}).", name)
        return value
    return None


def prompt_text(body: dict[str, object], chat: bool) -> str:
    """The text a request prompts with: the messages' contents one per line (chat), else the
    prompt (a batch's prompts one per line)."""
    if chat:
        return "\n".join(m.content for m in read_messages(body))
    return "\n".join(p.as_text() for p in read_prompts(body))
