"""The user's own requests: a JSON Lines file, one request per line.

Each non-blank line is an object with `prompt` (a string) or `messages` (a list of
`{"role", "content"}`), and optionally `output_len` (tokens to ask for; else
`--jsonl-output-len`). Other keys are ignored, so a file written by
`servelab data inspect --save-samples` loads back unchanged. Lines are used in file order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.errors import ServelabError
from servelab.workload.request import ChatMessage, RequestSpec

if TYPE_CHECKING:
    from servelab.workload.tokenizer import TokenizerHandle

_ROLES = ("system", "user", "assistant")


class _LineError(Exception):
    """A problem with one line; the reader adds file and line number."""


def _messages(value: object) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise _LineError("'messages' must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise _LineError(f"messages[{i}] must be an object with 'role' and 'content'")
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            raise _LineError(f"messages[{i}].role must be one of {', '.join(_ROLES)} (got {role!r})")
        if not isinstance(content, str):
            raise _LineError(f"messages[{i}].content must be a string")
        out.append(ChatMessage(role, content))
    return tuple(out)


def _parse_line(text: str, default_output_len: int, use_chat: bool):
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise _LineError(f"expected a JSON object, found {type(obj).__name__}")
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise _LineError("needs exactly one of 'prompt' (a string) and 'messages' (a list)")
    output_len = obj.get("output_len", default_output_len)
    if isinstance(output_len, bool) or not isinstance(output_len, int) or output_len < 1:
        raise _LineError(f"'output_len' must be an integer >= 1 (got {output_len!r})")
    if has_prompt:
        if not isinstance(obj["prompt"], str):
            raise _LineError("'prompt' must be a string")
        if use_chat:
            return None, (ChatMessage("user", obj["prompt"]),), output_len
        return obj["prompt"], None, output_len
    return None, _messages(obj["messages"]), output_len


def read_jsonl(
    path: Path,
    tok: TokenizerHandle,
    *,
    num_prompts: int,
    default_output_len: int,
    use_chat: bool,
) -> tuple[list[RequestSpec], list[str]]:
    """The first `num_prompts` requests of `path` and notes (e.g. when the file has fewer).

    `prompt_len` counts the prompt, or the chat turns' contents joined by newlines (no chat
    template). Raises ServelabError naming `file:line` and the problem.
    """
    if not path.is_file():
        raise ServelabError(f"--dataset-path {path}: no such file")
    parsed = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if len(parsed) == num_prompts:
                break
            try:
                line = raw.decode("utf-8")
                if line.strip():
                    parsed.append(_parse_line(line, default_output_len, use_chat))
            except UnicodeDecodeError as exc:
                raise ServelabError(f"{path}:{lineno}: not UTF-8 text ({exc.reason})") from None
            except _LineError as exc:
                raise ServelabError(f"{path}:{lineno}: {exc}") from None
    if not parsed:
        raise ServelabError(f"{path}: no requests (the file has no non-blank lines)")
    texts = [p if p is not None else "\n".join(m.content for m in ms) for p, ms, _ in parsed]
    counts = [len(ids) for ids in tok.encode_batch(texts)]
    requests = [
        RequestSpec(i, p, ms, n, out) for i, ((p, ms, out), n) in enumerate(zip(parsed, counts))
    ]
    notes = [f"{path}: {len(requests):,} requests in file order"]
    if len(requests) < num_prompts:
        notes.append(
            f"--num-prompts {num_prompts} asked for more requests than {path} holds; "
            f"all {len(requests):,} are used"
        )
    return requests, notes
