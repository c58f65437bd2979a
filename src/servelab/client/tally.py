"""Token accounting for one streamed response: which chunks carried tokens, and how many.

Count tokens, not chunks. A chunk "carries tokens" when it has a non-empty `choices` list
and is not the chat API's opening role-only delta (`{"role": "assistant", "content": ""}`);
reasoning deltas (`reasoning_content` / `reasoning`) carry tokens like content does, so
they count toward TTFT. An empty text (`""`, vLLM's partial UTF-8 token) still carries a
token. How many tokens each carrying chunk holds:

* when every carrying chunk has the running `usage.completion_tokens` (vLLM's and SGLang's
  `continuous_usage_stats`), chunk i holds `cum_i - cum_(i-1)` tokens, exactly;
* otherwise the output length is the final usage's `completion_tokens` (or, without any
  usage, the number of carrying chunks) spread as evenly as integers allow over the
  carrying chunks, the first chunks taking the remainder.

ITL assignment: the first token of the first chunk defines TTFT; the other tokens of that
chunk arrived with it (ITL 0 each). A later chunk of k tokens arriving g ms after the
previous carrying chunk contributes k values of g/k. So `len(itl_ms) == output_len - 1`
and `sum(itl_ms) == e2el_ms - ttft_ms` always hold.

Per chunk the work is a few substring searches on the payload bytes: JSON escapes quotes
inside strings, so a key pattern like `"completion_tokens"` can only match a real key. The
payload is parsed as JSON only for the rare chunks that need it (role deltas, errors).
With `keep_text` the carrying payloads are also kept (a list append) and parsed once, after
the answer ended (`text()`), for the generated text, the reasoning text and how many
tokens were reasoning: off the per-token path, where parsing every chunk would cost the
client its timing accuracy at high token rates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from servelab.client.sse import DONE

_USAGE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_RARE = re.compile(rb'"(?:role|error)"')


def _error_message(data: bytes) -> str | None:
    """The server's error message when this payload is an error object, else None."""
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if err is None and obj.get("object") == "error":
        err = obj
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message", err))[:200]
    return str(err)[:200]


def _role_delta_has_tokens(data: bytes) -> bool:
    """Whether a chunk with a `role` delta also carries content or reasoning text."""
    try:
        choices = json.loads(data).get("choices") or []
    except (ValueError, AttributeError):
        return False
    for choice in choices:
        delta = choice.get("delta") or {}
        for key in ("content", "reasoning_content", "reasoning"):
            if delta.get(key):
                return True
    return False


@dataclass(frozen=True, slots=True)
class AnswerText:
    """What an answer said: its answer text, its reasoning text (`reasoning_content` /
    `reasoning` deltas), and how many of its tokens came in reasoning-only chunks."""

    text: str
    reasoning: str
    reasoning_tokens: int
    first_answer_chunk: int | None  # index among the carrying chunks; None: no answer text


def _chunk_texts(data: bytes) -> tuple[str, str]:
    """(answer text, reasoning text) of one carrying payload's first choice."""
    try:
        choices = json.loads(data).get("choices") or []
    except (ValueError, AttributeError):
        return "", ""
    if not choices or not isinstance(choices[0], dict):
        return "", ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):  # chat API
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        return str(delta.get("content") or ""), str(reasoning)
    return str(choice.get("text") or ""), ""


class StreamTally:
    """Collects one response's carrying-chunk arrival times (seconds, the client's clock)."""

    __slots__ = ("times", "cums", "usage_tokens", "done", "error", "payloads")

    def __init__(self, keep_text: bool = False) -> None:
        self.times: list[float] = []
        self.cums: list[int | None] = []
        self.usage_tokens: int | None = None
        self.done = False
        self.error: str | None = None
        self.payloads: list[bytes] | None = [] if keep_text else None

    def add(self, data: bytes, t: float) -> None:
        """Account for one SSE payload that arrived at time `t` (s)."""
        if data == DONE:
            self.done = True
            return
        k = data.rfind(b'"completion_tokens"')
        if k >= 0:
            m = _USAGE.match(data, k)
            cum = int(m.group(1)) if m is not None else None
            if cum is not None:
                self.usage_tokens = cum
        else:
            cum = None
        i = data.find(b'"choices"')
        if i < 0:
            if b'"error"' in data:
                self.error = _error_message(data)
            return
        after = data[i + 9 : i + 13]
        if after[:3] == b":[]" or after == b": []":
            return  # a usage-only chunk
        if _RARE.search(data) is not None:
            if b'"error"' in data:
                msg = _error_message(data)
                if msg is not None:
                    self.error = msg
                    return
            if b'"role"' in data and not _role_delta_has_tokens(data):
                return
        self.times.append(t)
        self.cums.append(cum)
        if self.payloads is not None:
            self.payloads.append(data)

    def tokens_per_chunk(self) -> list[int]:
        """How many tokens each carrying chunk held (see the module docstring)."""
        c = len(self.times)
        cums = self.cums
        total = self.usage_tokens if self.usage_tokens is not None else c
        if c and None not in cums:
            ks: list[int] = []
            prev = 0
            for cum in cums:
                assert cum is not None
                ks.append(cum - prev)
                prev = cum
            if prev == total and min(ks) >= 0:
                return ks
        base, rem = divmod(total, c) if c else (0, 0)
        return [base + 1] * rem + [base] * (c - rem)

    def timeline(self, send_t: float) -> tuple[int, float, list[float], float]:
        """(output_len, ttft_ms, itl_ms, e2el_ms) for a request sent at `send_t` (s).

        Only valid when at least one chunk carried a token.
        """
        ks = self.tokens_per_chunk()
        itl: list[float] = []
        first_t: float | None = None
        prev_t = 0.0
        total = 0
        for t, k in zip(self.times, ks):
            if k <= 0:
                continue
            total += k
            if first_t is None:
                first_t = prev_t = t
                if k > 1:
                    itl.extend([0.0] * (k - 1))
                continue
            gap = (t - prev_t) * 1000.0 / k
            if k == 1:
                itl.append(gap)
            else:
                itl.extend([gap] * k)
            prev_t = t
        assert first_t is not None, "timeline() needs at least one carrying chunk"
        return total, (first_t - send_t) * 1000.0, itl, (prev_t - send_t) * 1000.0

    def text(self) -> AnswerText | None:
        """The answer's texts (None unless made with `keep_text`); call after it ended."""
        if self.payloads is None:
            return None
        answer: list[str] = []
        thought: list[str] = []
        reasoning_tokens = 0
        first: int | None = None
        for i, (data, k) in enumerate(zip(self.payloads, self.tokens_per_chunk())):
            a, r = _chunk_texts(data)
            answer.append(a)
            thought.append(r)
            if r and not a:
                reasoning_tokens += k
            elif first is None and a:
                first = i
        return AnswerText("".join(answer), "".join(thought), reasoning_tokens, first)

    @property
    def has_tokens(self) -> bool:
        return bool(self.times) and sum(self.tokens_per_chunk()) > 0
