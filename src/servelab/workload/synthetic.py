"""Synthetic datasets made of random tokens: `random` and `prefix_repetition`.

Text is built from random token ids, decoded, then re-encoded and adjusted until the text
sent has exactly the wanted number of tokens (`servelab.workload.textfit`), so `prompt_len`
is always the true count of the prompt (vLLM's prefix_repetition reports the drawn ids' count instead, which drifts from the
text's count). Prompts that share a prefix share its exact token ids: a suffix is kept only
when encoding prefix + suffix leaves the prefix's ids untouched.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from servelab.workload.request import ChatMessage, RequestSpec
from servelab.workload.textfit import Fitted, TextMaker, WindowFitter
from servelab.workload.tokenizer import TokenizerHandle

_CHUNK = 4096  # requests whose first tries are decoded and encoded in one batch


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
    opts: RandomShape, tok: TokenizerHandle, rng: np.random.Generator, spliced: bool = True
) -> tuple[list[RequestSpec], list[array]]:
    """`random_requests`, and each request's prompt token ids (`tok.encode(request.text)`),
    which fitting the texts computed anyway, as arrays of `tok.id_typecode()` (2 bytes an
    id for the built-in tokenizer, where a list of ints takes 8 and its ints 32 more).

    Without a prefix, and where splicing encodings is exact for `tok`
    (`servelab.workload.splice`), the windows are fitted by `WindowFitter`; `spliced=False`
    (the bench's and the tests' reference), and every other case, batches the first tries
    and retries the misses in order. Both give the same requests and ids."""
    maker = TextMaker(tok, rng)
    input_lens, output_lens, offsets, prefix = _random_draws(opts, maker, rng)
    out = []
    ids = []
    use_chat = opts.use_chat
    fits = _fitted_prompts(maker, tok, input_lens, offsets, prefix, spliced)
    for i, (fitted, o) in enumerate(zip(fits, output_lens.tolist())):
        out.append(request_spec(i, fitted.text, len(fitted.ids), o, use_chat))
        ids.append(fitted.ids)
    return out, ids


@dataclass(frozen=True, slots=True)
class RandomPrompts:
    """The random dataset without its texts: request i's prompt token ids `token_ids[i]`
    (`tok.encode` of the text `random_requests_and_ids` makes for it, as an array of
    `tok.id_typecode()`; its length is the request's `prompt_len`) and its `output_lens[i]`."""

    token_ids: list[array]
    output_lens: list[int]


def random_prompt_ids(opts: RandomShape, tok: TokenizerHandle,
                      rng: np.random.Generator) -> RandomPrompts:
    """`random_requests_and_ids`'s ids and output lengths, the same draws from `rng`, for a
    consumer that reads no text (the simulator behind a routing policy that reads no
    prompt): where the windows are spliced (`WindowFitter`), no text is made but the few
    that a retry decodes, and none is kept (at a million prompts of ~220 tokens the texts
    are 2.8 GB of fresh memory, seconds of system time on a VM, that nothing reads)."""
    maker = TextMaker(tok, rng)
    input_lens, output_lens, offsets, prefix = _random_draws(opts, maker, rng)
    windows = WindowFitter.build(maker, tok) if prefix is None else None
    if windows is not None:
        starts = _window_starts(offsets, len(maker.alphabet))
        ids = [windows.fit_ids(start, m) for start, m in zip(starts, input_lens.tolist())]
    else:  # texts are needed to fit these (batched, as `spliced=False`); each is dropped
        ids = []
        for fitted in _fitted_prompts(maker, tok, input_lens, offsets, prefix, False):
            assert isinstance(fitted.ids, array)  # (`_fitted_prompts` makes arrays)
            ids.append(fitted.ids)
    return RandomPrompts(ids, output_lens.tolist())


def _window_starts(offsets: np.ndarray, alphabet_len: int) -> list[int]:
    """Request i's first try starts at the alphabet's position `offsets[i] + i` (mod its
    length)."""
    return ((offsets + np.arange(len(offsets))) % alphabet_len).tolist()


def _fitted_prompts(maker: TextMaker, tok: TokenizerHandle, input_lens: np.ndarray,
                    offsets: np.ndarray, prefix: Fitted | None, spliced: bool) -> Iterator[Fitted]:
    """Request i's fitted prompt, in order, its ids an array of `tok.id_typecode()`: its
    first try is the alphabet's window from `offsets[i] + i`, of `input_lens[i]` tokens,
    after `prefix`."""
    n, alphabet_len = len(input_lens), len(maker.alphabet)
    windows = WindowFitter.build(maker, tok) if spliced and prefix is None else None
    if windows is not None:
        # the same fits, spliced from a few encodings of the alphabet's text
        for start, m in zip(_window_starts(offsets, alphabet_len), input_lens.tolist()):
            yield windows.fit(start, m)
        return
    typecode = tok.id_typecode()
    # Chunks bound the memory of the batched first tries (texts, encodings) at a million
    # requests; chunks run in order, so the generator's draws keep their order.
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        lens = input_lens[lo:hi].tolist()
        firsts = [maker.alphabet[(int(offsets[i]) + i + np.arange(m)) % alphabet_len].tolist()
                  for i, m in zip(range(lo, hi), lens)]
        for fitted in maker.fit_many(lens, prefix, firsts):
            yield Fitted(fitted.text, array(typecode, fitted.ids))


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
