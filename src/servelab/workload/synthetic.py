"""Synthetic datasets made of random tokens: `random` and `prefix_repetition`.

Text is built from random token ids, decoded, then re-encoded and adjusted until the text
sent has exactly the wanted number of tokens, so `prompt_len` is always the true count of the
prompt (vLLM's prefix_repetition reports the drawn ids' count instead, which drifts from the
text's count). Prompts that share a prefix share its exact token ids: a suffix is kept only
when encoding prefix + suffix leaves the prefix's ids untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.errors import ServelabError
from servelab.workload.request import ChatMessage, RequestSpec
from servelab.workload.tokenizer import TokenizerHandle

_MAX_TRIES = 64
_CHUNK = 4096  # requests whose first tries are decoded and encoded in one batch


@dataclass(frozen=True, slots=True)
class Fitted:
    """A text and its exact token ids (`ids == tokenizer.encode(text)`)."""

    text: str
    ids: list[int]


class TextMaker:
    """Builds texts with an exact token count from random ids of one tokenizer."""

    def __init__(self, tok: TokenizerHandle, rng: np.random.Generator) -> None:
        self._tok = tok
        self._rng = rng
        special = tok.special_ids()
        ids = list(range(tok.info.vocab_size))
        # Ids that decode to clean text on their own: no special tokens, no partial UTF-8
        # sequences (which decode to U+FFFD and re-encode as different tokens).
        self.alphabet = np.array(
            [i for i, t in zip(ids, tok.decode_each(ids))
             if i not in special and t and "\ufffd" not in t],
            dtype=np.int64,
        )
        if len(self.alphabet) < 2:
            raise ServelabError(f"tokenizer {tok.info.name}: too few plain tokens to make text")

    def random_ids(self, n: int) -> list[int]:
        return self.alphabet[self._rng.integers(0, len(self.alphabet), size=n)].tolist()

    def fit(self, n: int, head: Fitted | None = None, ids: list[int] | None = None) -> Fitted:
        """`head.text` + a body of exactly `n` tokens, starting from `ids` (else random)."""
        ids = list(ids) if ids is not None else self.random_ids(n)
        body = self._tok.decode(ids)
        head_text = head.text if head is not None else ""
        return self._settle(n, head, ids, body, self._tok.encode(head_text + body))

    def fit_many(self, lengths: Sequence[int], head: Fitted | None,
                 ids: Sequence[list[int]]) -> list[Fitted]:
        """`[fit(n, head, i) for n, i in zip(lengths, ids)]`, the same texts and the same draws
        from the generator, with the first try of every text decoded and encoded in one batch.

        A first try draws nothing from the generator (its ids are given), so trying them all
        first and then retrying the misses in order draws exactly what the one-by-one loop
        draws; the batch saves the per-call overhead (and runs on the tokenizer's threads).
        """
        head_text = head.text if head is not None else ""
        bodies = self._tok.decode_batch(ids)
        fulls = self._tok.encode_batch([head_text + b for b in bodies])
        return [self._settle(n, head, list(i), b, f)
                for n, i, b, f in zip(lengths, ids, bodies, fulls)]

    def _settle(self, n: int, head: Fitted | None, ids: list[int], body: str,
                full: list[int]) -> Fitted:
        """The fitted text, given the first try: `body` decoded from `ids`, `full` the
        encoding of the head's text + `body`; retries adjust the ids (or draw fresh ones)."""
        head_text, head_ids = (head.text, head.ids) if head is not None else ("", [])
        k = len(head_ids)
        for attempt in range(_MAX_TRIES):
            if attempt:
                body = self._tok.decode(ids)
                full = self._tok.encode(head_text + body)
            got = full[k:]
            if full[:k] == head_ids:
                if len(got) == n:
                    return Fitted(head_text + body, full)
                if attempt % 16 != 15:
                    ids = got[:n] if len(got) > n else got + self.random_ids(n - len(got))
                    continue
            # The body merged into the head's last tokens, or trimming keeps oscillating:
            # start again from fresh ids.
            ids = self.random_ids(n)
        raise ServelabError(
            f"tokenizer {self._tok.info.name}: could not build a text of exactly {n} tokens "
            f"after a {k}-token prefix in {_MAX_TRIES} tries"
        )


def request_spec(index: int, text: str, prompt_len: int, output_len: int, use_chat: bool,
                 images: tuple[str, ...] = ()) -> RequestSpec:
    """A request of one text: a completions prompt, or one user turn when `use_chat`."""
    if use_chat or images:
        return RequestSpec(index, None, (ChatMessage("user", text),), prompt_len, output_len,
                           images)
    return RequestSpec(index, text, None, prompt_len, output_len)


def length_bounds(length: int, ratio: float, minimum: int) -> tuple[int, int]:
    """vLLM's inclusive range [int(len*(1-r)), int(len*(1+r))], floored at `minimum`."""
    return max(int(length * (1 - ratio)), minimum), max(int(length * (1 + ratio)), minimum)


@dataclass(frozen=True, slots=True)
class RandomShape:
    """vLLM's random dataset: `num_prompts` requests of `input_len` prompt and `output_len`
    output tokens, each drawn within +-`range_ratio`, after a shared `prefix_len`-token
    prefix; chat messages when `use_chat`."""

    num_prompts: int
    input_len: int
    output_len: int
    range_ratio: float = 0.0
    prefix_len: int = 0
    use_chat: bool = False


@dataclass(frozen=True, slots=True)
class PrefixRepetitionShape:
    """vLLM's prefix_repetition dataset: `num_prompts` requests, each one of `num_prefixes`
    `prefix_len`-token prefixes and its own `suffix_len`-token suffix, `output_len` out."""

    num_prompts: int
    prefix_len: int
    suffix_len: int
    num_prefixes: int
    output_len: int
    use_chat: bool = False


def random_requests(
    opts: RandomShape, tok: TokenizerHandle, rng: np.random.Generator
) -> list[RequestSpec]:
    """vLLM's RandomDataset: a shared random prefix, then consecutive ids from a random offset.

    Input lengths are uniform in [L(1-r), L(1+r)] tokens after a `random_prefix_len` prefix;
    output lengths likewise (at least 1).
    """
    return random_requests_and_ids(opts, tok, rng)[0]


def _random_draws(opts: RandomShape, maker: TextMaker, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Fitted | None]:
    """The random dataset's draws before any request's text, in the generator's order:
    input lengths, output lengths, alphabet offsets (one per request), the shared prefix."""
    n = opts.num_prompts
    in_lo, in_hi = length_bounds(opts.input_len, opts.range_ratio, 0)
    out_lo, out_hi = length_bounds(opts.output_len, opts.range_ratio, 1)
    input_lens = rng.integers(in_lo, in_hi + 1, size=n)
    output_lens = rng.integers(out_lo, out_hi + 1, size=n)
    offsets = rng.integers(0, len(maker.alphabet), size=n)
    prefix = maker.fit(opts.prefix_len) if opts.prefix_len else None
    return input_lens, output_lens, offsets, prefix


def random_requests_and_ids(
    opts: RandomShape, tok: TokenizerHandle, rng: np.random.Generator
) -> tuple[list[RequestSpec], list[list[int]]]:
    """`random_requests`, and each request's prompt token ids (`tok.encode(request.text)`),
    which fitting the texts computed anyway."""
    maker = TextMaker(tok, rng)
    n = opts.num_prompts
    input_lens, output_lens, offsets, prefix = _random_draws(opts, maker, rng)
    alphabet_len = len(maker.alphabet)
    out = []
    ids = []
    # Chunks bound the memory of the batched first tries (texts, encodings) at a million
    # requests; chunks run in order, so the generator's draws keep their order.
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        lens = input_lens[lo:hi].tolist()
        firsts = [maker.alphabet[(int(offsets[i]) + i + np.arange(m)) % alphabet_len].tolist()
                  for i, m in zip(range(lo, hi), lens)]
        for i, fitted in zip(range(lo, hi), maker.fit_many(lens, prefix, firsts)):
            out.append(request_spec(i, fitted.text, len(fitted.ids), int(output_lens[i]),
                                    opts.use_chat))
            ids.append(fitted.ids)
    return out, ids


def random_requests_one_by_one(
    opts: RandomShape, tok: TokenizerHandle, rng: np.random.Generator
) -> list[RequestSpec]:
    """`random_requests` as it was before its first tries were batched: one `fit` per request.

    The same requests for the same generator; kept as the reference the tests and
    bench/workload_speed.py compare the batched path with.
    """
    maker = TextMaker(tok, rng)
    n = opts.num_prompts
    input_lens, output_lens, offsets, prefix = _random_draws(opts, maker, rng)
    out = []
    for i in range(n):
        start = (offsets[i] + i + np.arange(input_lens[i])) % len(maker.alphabet)
        fitted = maker.fit(int(input_lens[i]), prefix, maker.alphabet[start].tolist())
        out.append(request_spec(i, fitted.text, len(fitted.ids), int(output_lens[i]), opts.use_chat))
    return out


def prefix_repetition_requests(
    opts: PrefixRepetitionShape, tok: TokenizerHandle, rng: np.random.Generator
) -> list[RequestSpec]:
    """`num_prefixes` random prefixes; request i = prefix (i mod num_prefixes) + unique suffix.

    Requests are shuffled with `rng` so prefixes interleave, as vLLM does.
    """
    maker = TextMaker(tok, rng)
    n = opts.num_prompts
    prefixes = [maker.fit(opts.prefix_len) for _ in range(opts.num_prefixes)]
    texts = []
    for i in range(n):
        fitted = maker.fit(opts.suffix_len, prefixes[i % len(prefixes)])
        texts.append(fitted)
    order = rng.permutation(n)
    return [
        request_spec(pos, texts[j].text, len(texts[j].ids), opts.output_len, opts.use_chat)
        for pos, j in enumerate(order)
    ]
