"""Text for the simulator server: prompts to token ids, and the text of generated tokens.

The simulator needs prompt *lengths* (and ids, for prefix caching), and output text that
looks like a tokenizer's output so clients that re-tokenize or count characters behave as
with a real engine. Output tokens are drawn from the tokenizer's vocabulary with a
generator seeded by the request's index, so a run is reproducible.

Chat prompts are framed with ChatML (`<|im_start|>role\\ncontent<|im_end|>\\n`, then the
assistant header), the template of Qwen models, because a `tokenizer.json` carries no
chat template; the framing counts as prompt tokens as the tokenizer splits it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from servelab.workload.request import ChatMessage

# How many vocabulary entries are sampled for output text (enough variety, cheap start).
_CANDIDATES = 4096


class PromptTokenizer(Protocol):
    """What the server needs of a tokenizer (`servelab.workload.tokenizer.TokenizerHandle`)."""

    def encode(self, text: str) -> list[int]: ...
    def decode_each(self, ids: Sequence[int]) -> list[str]: ...
    def special_ids(self) -> set[int]: ...


def render_chat(messages: Sequence[ChatMessage]) -> str:
    """The prompt text a ChatML chat template makes of `messages` (generation prompt added)."""
    parts = [f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


class TokenTexts:
    """Deterministic output text: `text(request_index, position, k)` for k tokens."""

    def __init__(self, tokenizer: PromptTokenizer, vocab_size: int, seed: int = 0) -> None:
        special = tokenizer.special_ids()
        step = max(1, vocab_size // _CANDIDATES)
        ids = [i for i in range(0, vocab_size, step) if i not in special]
        texts = [t for t in tokenizer.decode_each(ids) if t.strip() and "\ufffd" not in t]
        # A tokenizer whose every token is a byte fragment still yields readable output.
        self._texts = texts or [" token"]
        self._seed = seed

    def for_request(self, request_index: int) -> RequestText:
        """The text source of one request (its own seeded generator)."""
        return RequestText(self._texts, random.Random(f"{self._seed}:{request_index}"))


class RequestText:
    """The next tokens' text for one request."""

    def __init__(self, texts: list[str], rng: random.Random) -> None:
        self._texts = texts
        self._rng = rng

    def next(self, num_tokens: int) -> str:
        """The text of the next `num_tokens` tokens, concatenated."""
        return "".join(self._rng.choices(self._texts, k=num_tokens))
