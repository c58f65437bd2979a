"""Texts of an exact token count, built from random token ids of one tokenizer.

Text is built from random token ids, decoded, then re-encoded and adjusted until the text
has exactly the wanted number of tokens (`TextMaker.fit`, the procedure of vLLM's random
dataset). `WindowFitter` gives the same texts, ids and generator draws for first tries that
are windows of the alphabet, with far fewer tokenizer calls, where splicing encodings is
exact (`servelab.workload.splice`).
"""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from servelab.errors import ServelabError
from servelab.workload.splice import SpliceEncoder
from servelab.workload.tokenizer import TokenizerHandle

_MAX_TRIES = 64
_FRESH_EVERY = 16  # every 16th try starts again from fresh ids (trimming may oscillate)
# Encodings and trimmed tails kept by text: a million random-dataset requests meet 66,371
# distinct texts and 32,818 trims, so the bound holds far more than a fleet's worth.
_MAX_KNOWN = 1 << 20


@dataclass(frozen=True, slots=True)
class Fitted:
    """A text and its exact token ids (`list(ids) == tokenizer.encode(text)`): a list from
    `TextMaker`, a compact `array` from `WindowFitter`."""

    text: str
    ids: Sequence[int]


class TextMaker:
    """Builds texts with an exact token count from random ids of one tokenizer."""

    def __init__(self, tok: TokenizerHandle, rng: np.random.Generator) -> None:
        self._tok = tok
        self._rng = rng
        special = tok.special_ids()
        ids = list(range(tok.info.vocab_size))
        # Ids that decode to clean text on their own: no special tokens, no partial UTF-8
        # sequences (which decode to U+FFFD and re-encode as different tokens).
        self.text_by_id = tok.decode_each(ids)
        self.alphabet = np.array(
            [i for i, t in zip(ids, self.text_by_id)
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

    def resume(self, n: int, ids: list[int], attempt: int) -> Fitted:
        """What `fit(n, None, ...)` returns when its try number `attempt` starts from `ids`
        (the loop `fit` runs, entered there: the same draws from then on)."""
        body = self._tok.decode(ids)
        return self._settle(n, None, ids, body, self._tok.encode(body), attempt)

    def _settle(self, n: int, head: Fitted | None, ids: list[int], body: str,
                full: list[int], start: int = 0) -> Fitted:
        """The fitted text, given try number `start`: `body` decoded from `ids`, `full` the
        encoding of the head's text + `body`; retries adjust the ids (or draw fresh ones)."""
        head_text, head_ids = (head.text, list(head.ids)) if head is not None else ("", [])
        k = len(head_ids)
        for attempt in range(start, _MAX_TRIES):
            if attempt > start:
                body = self._tok.decode(ids)
                full = self._tok.encode(head_text + body)
            got = full[k:]
            if full[:k] == head_ids:
                if len(got) == n:
                    return Fitted(head_text + body, full)
                if attempt % _FRESH_EVERY != _FRESH_EVERY - 1:
                    ids = got[:n] if len(got) > n else got + self.random_ids(n - len(got))
                    continue
            # The body merged into the head's last tokens, or trimming keeps oscillating:
            # start again from fresh ids.
            ids = self.random_ids(n)
        raise ServelabError(
            f"tokenizer {self._tok.info.name}: could not build a text of exactly {n} tokens "
            f"after a {k}-token prefix in {_MAX_TRIES} tries"
        )


class WindowFitter:
    """`TextMaker.fit(n, None, window)` for windows of the alphabet: the ids
    `alphabet[(start + t) mod A]`, t < n, as the random dataset's first tries are.

    Such a window's text is a slice of the alphabet's texts laid end to end (twice, for the
    windows that wrap), since every alphabet token decodes on its own to complete UTF-8.
    Its encoding is spliced at the forced boundaries (`servelab.workload.splice`): the
    encodings of the stretches between the long text's boundaries are made once; a window
    adds the encodings of its two ends. A retry changes only the text after its last forced
    boundary (trimmed to the first n tokens, or extended by drawn ids), so only that tail is
    encoded again. A try the splice does not cover (no forced boundary, an added token's
    content, a cut before the boundary, fresh ids) goes to `TextMaker.resume` at the same
    try: every window gets `fit`'s text, ids and draws.

    What a window's first two tries need depends on its start, its end or where its cut
    falls, each an index below about twice the alphabet's size, so it is kept by that index:
    a million windows of a 32,000-token alphabet meet each a few dozen times, and most
    windows cost no tokenizer call. The ids come back as compact arrays
    (`TokenizerHandle.id_typecode`), spliced without making a Python int per token.
    """

    __slots__ = ("_maker", "_tok", "_enc", "_typecode", "_alphabet", "_text", "_cum",
                 "_bounds", "_flat", "_starts", "_heads", "_tails", "_cuts", "_trims", "_known")

    def __init__(self, maker: TextMaker, enc: SpliceEncoder) -> None:
        self._maker, self._tok, self._enc = maker, enc.tok, enc
        self._typecode = self._tok.id_typecode()
        self._alphabet = maker.alphabet.tolist()
        texts = [maker.text_by_id[a] for a in self._alphabet] * 2
        self._text = "".join(texts)
        self._cum = [0, *itertools.accumulate(map(len, texts))]
        bounds = enc.forced_boundaries(self._text)
        flat = array(self._typecode)
        starts = [0]
        for ids in self._tok.encode_batch([self._text[a:b] for a, b in zip(bounds, bounds[1:])]):
            flat.extend(ids)
            starts.append(len(flat))
        self._bounds, self._flat, self._starts = bounds, flat, starts
        # Kept by index (lists: a lookup per window is the cost that matters here), None
        # until met: by a window's start, (i1, the encoding of the text from the start to
        # bound i1); by its end, its `_Tail` from its last bound; by a cut's index e into
        # `_flat`, the `_Tail` from the last bound before e to e.
        self._heads: list[tuple[int, array] | None] = [None] * len(self._alphabet)
        self._tails: list[_Tail | None] = [None] * len(texts)
        self._cuts: list[_Tail | None] = [None] * (len(flat) + 1)
        self._trims: dict[tuple[str, int], _Trim] = {}  # by (tail text, k), `_MAX_KNOWN`
        self._known: dict[str, array] = {}  # encodings by text (`_MAX_KNOWN`)

    @classmethod
    def build(cls, maker: TextMaker, tok: TokenizerHandle) -> WindowFitter | None:
        """The fitter, or None where splicing is not exact for `tok` (or the alphabet's text
        holds an added token's content)."""
        enc = SpliceEncoder.for_tokenizer(tok)
        if enc is None:
            return None
        fitter = cls(maker, enc)
        return fitter if enc.clean(fitter._text) else None

    def fit(self, start: int, n: int) -> Fitted:
        """`maker.fit(n, None, [alphabet[(start + t) % A] for t in range(n)])`, its ids an
        array of `tok.id_typecode()`, for `0 <= start < A`."""
        got = self._window(start, n)
        if isinstance(got, Fitted):
            return got
        text = self._text
        # one slice of the long text where the body is one (no second copy)
        body = text[got.start:got.end] if got.end >= 0 else text[got.start:got.bound_at] + got.tail
        return Fitted(body, got.ids)

    def fit_ids(self, start: int, n: int) -> array:
        """`fit(start, n).ids`, the same ids and draws, without making the text where the
        splice covers the window (a million prompts' texts are 2.8 GB that a caller
        reading only ids would fill and never read)."""
        ids = self._window(start, n).ids
        assert isinstance(ids, array)  # (`_resume` makes an array too)
        return ids

    def _window(self, start: int, n: int) -> Fitted | _Spliced:
        """The fitted window: where the splice covers it, its ids and where its text lies
        in the long text; else what `TextMaker.resume` made.

        `TextMaker._settle`'s loop on the window's body: the text from its start to bound
        `ik` + `sstr` (the window's tail at first), encoded as `head` (up to bound `i1`) +
        the stretches from bound `i1` to `ik` + `sids`; `send` is where `sstr` ends in the
        long text when it is the long text's own from bound `ik`, else -1."""
        period = len(self._alphabet)
        if not 0 < n <= period:
            return self._resume(n, [self._alphabet[(start + t) % period] for t in range(n)], 0)
        i1, head = self._heads[start] or self._head(start)
        ik, sstr, sids, send = self._tails[start + n] or self._tail(start + n)
        if i1 > ik:  # no forced boundary inside the window
            return self._resume(n, [self._alphabet[(start + t) % period] for t in range(n)], 0)
        bounds, flat, starts = self._bounds, self._flat, self._starts
        a, s1, hl = self._cum[start], starts[i1], len(head)
        for attempt in range(_FRESH_EVERY):
            j = hl + starts[ik] - s1  # tokens before bound ik
            have = j + len(sids)
            if have == n:
                return _Spliced(head + flat[s1:starts[ik]] + sids, a, send, bounds[ik], sstr)
            if attempt == _FRESH_EVERY - 1:
                break
            if have > n:
                if n > j:
                    trim = self._trims.get((sstr, n - j)) or self._trim(sstr, sids, n - j)
                    nxt = _Tail(ik, trim.text, trim.ids,
                                bounds[ik] + len(trim.text) if send >= 0 and trim.prefix else -1)
                else:  # the cut falls before bound ik: from the last bound before the cut
                    e = n - hl + s1
                    nxt = (self._cuts[e] or self._cut(e)) if e >= 0 else _Tail(-1, "", None, -1)
                    if nxt.bound < i1:  # before the window's first bound
                        nxt = _Tail(i1 - 1, "", None, -1)
                if nxt.ids is None:
                    full = head + flat[s1:starts[ik]] + sids
                    return self._resume(n, full[:n].tolist(), attempt + 1)
                ik, sstr, sids, send = nxt
            else:
                maker = self._maker
                drawn = maker.random_ids(n - have)
                # decode(full + drawn) == body + the drawn tokens' own texts
                sstr = sstr + "".join([maker.text_by_id[t] for t in drawn])
                if not self._enc.clean(sstr):
                    full = head + flat[s1:starts[ik]] + sids
                    return self._resume(n, full.tolist() + drawn, attempt + 1)
                sids = self._encode(sstr)
                send = -1
        # the 16th try missed too: `TextMaker._settle` starts again from fresh ids
        return self._resume(n, self._maker.random_ids(n), _FRESH_EVERY)

    def _encode(self, text: str) -> array:
        """`tok.encode(text)`, remembered (callers never change the array): a cut often
        ends where a window does, so a cut's text is often a tail's."""
        got = self._known.get(text)
        if got is None:
            got = array(self._typecode, self._tok.encode(text))
            if len(self._known) < _MAX_KNOWN:
                self._known[text] = got
        return got

    def _head(self, start: int) -> tuple[int, array]:
        a = self._cum[start]
        i1 = bisect_right(self._bounds, a)
        got = (i1, self._encode(self._text[a:self._bounds[i1]]) if i1 < len(self._bounds)
               else array(self._typecode))
        self._heads[start] = got
        return got

    def _tail(self, end: int) -> _Tail:
        b = self._cum[end]
        ik = bisect_left(self._bounds, b) - 1
        tail = self._text[self._bounds[ik]:b] if ik >= 0 else ""
        got = _Tail(ik, tail, self._encode(tail), b)
        self._tails[end] = got
        return got

    def _spliceable(self, sstr: str) -> array | None:
        """`sstr`'s encoding where it can follow a forced boundary (it starts with the
        boundary's space and holds no added token's content), else None."""
        return self._encode(sstr) if sstr.startswith(" ") and self._enc.clean(sstr) else None

    def _cut(self, e: int) -> _Tail:
        c = bisect_left(self._starts, e) - 1
        if c < 0:
            return _Tail(c, "", None, -1)
        q = self._bounds[c]
        sstr = self._tok.decode(self._flat[self._starts[c]:e].tolist())
        got = _Tail(c, sstr, self._spliceable(sstr),
                    q + len(sstr) if self._text.startswith(sstr, q) else -1)
        self._cuts[e] = got
        return got

    def _trim(self, sstr: str, sids: array, k: int) -> _Trim:
        # decode(full[:n]) == body to bound ik + decode(sids[:k]): the tokens before a
        # bound are whole UTF-8
        cut = self._tok.decode(sids[:k].tolist())
        got = _Trim(cut, self._spliceable(cut), sstr.startswith(cut))
        if len(self._trims) < _MAX_KNOWN:  # tails after drawn ids never repeat
            self._trims[sstr, k] = got
        return got

    def _resume(self, n: int, ids: list[int], attempt: int) -> Fitted:
        fitted = self._maker.resume(n, ids, attempt)
        return Fitted(fitted.text, array(self._typecode, fitted.ids))


class _Spliced(NamedTuple):
    """A window fitted by the splice: its `ids`, and its text, which is the long text from
    character `start` to `end` when `end` >= 0, else from `start` to `bound_at` + `tail`."""

    ids: array
    start: int
    end: int
    bound_at: int
    tail: str


class _Tail(NamedTuple):
    """A window's body after its last forced boundary: `bound` (an index into the long
    text's boundaries), `text` from there, `ids` its encoding (None where the splice does
    not cover it), `end` the character where `text` ends in the long text when it is the
    long text's own from that boundary, else -1."""

    bound: int
    text: str
    ids: array | None
    end: int


class _Trim(NamedTuple):
    """A tail cut to its encoding's first k ids: `text` their decoding, `ids` its encoding
    (None where the splice does not cover it), `prefix` whether `text` begins the tail."""

    text: str
    ids: array | None
    prefix: bool
