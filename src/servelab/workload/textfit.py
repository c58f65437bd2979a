"""Texts of an exact token count, built from random token ids of one tokenizer.

Text is built from random token ids, decoded, then re-encoded and adjusted until the text
has exactly the wanted number of tokens (`TextMaker.fit`, the procedure of vLLM's random
dataset). `WindowFitter` gives the same texts, ids and generator draws for first tries that
are windows of the alphabet, with far fewer tokenizer calls, where splicing encodings is
exact (`servelab.workload.splice`).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.errors import ServelabError
from servelab.workload.splice import SpliceEncoder
from servelab.workload.tokenizer import TokenizerHandle

_MAX_TRIES = 64
_FRESH_EVERY = 16  # every 16th try starts again from fresh ids (trimming may oscillate)
# Encodings of windows' ends and retries' tails kept: few distinct strings (~0.2 per
# request over 300,000 requests), so the bound holds a fleet's million requests' worth.
_MAX_KNOWN = 1 << 20


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
        head_text, head_ids = (head.text, head.ids) if head is not None else ("", [])
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
    encoded again; ends and tails repeat across windows, so their encodings are kept. A try the splice does not cover (no
    forced boundary, an added token's content, a cut before the boundary, fresh ids) goes
    to `TextMaker.resume` at the same try: every window gets `fit`'s text, ids and draws.
    """

    __slots__ = ("_maker", "_tok", "_enc", "_alphabet", "_text", "_cum", "_bounds", "_flat",
                 "_starts", "_known")

    def __init__(self, maker: TextMaker, enc: SpliceEncoder) -> None:
        self._maker, self._tok, self._enc = maker, enc.tok, enc
        self._alphabet = maker.alphabet.tolist()
        texts = [maker.text_by_id[a] for a in self._alphabet] * 2
        self._text = "".join(texts)
        self._cum = [0, *itertools.accumulate(map(len, texts))]
        bounds = enc.forced_boundaries(self._text)
        flat: list[int] = []
        starts = [0]
        for ids in self._tok.encode_batch([self._text[a:b] for a, b in zip(bounds, bounds[1:])]):
            flat.extend(ids)
            starts.append(len(flat))
        self._bounds, self._flat, self._starts = bounds, flat, starts
        self._known: dict[str, list[int]] = {}  # ends' and tails' encodings (`_MAX_KNOWN`)

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
        """`maker.fit(n, None, [alphabet[(start + t) % A] for t in range(n)])`."""
        period = len(self._alphabet)
        bounds, cum, text = self._bounds, self._cum, self._text
        if n <= period:
            a, b = cum[start], cum[start + n]
            i1, ik = bisect_right(bounds, a), bisect_left(bounds, b) - 1
            if i1 <= ik:
                q1, qk = bounds[i1], bounds[ik]
                tail = text[qk:b]
                return self._settle(n, a, i1, ik, self._encode(text[a:q1]), tail,
                                    self._encode(tail))
        window = [self._alphabet[(start + t) % period] for t in range(n)]
        return self._maker.resume(n, window, 0)

    def _encode(self, text: str) -> list[int]:
        """`tok.encode(text)`, remembered (callers never change the list)."""
        got = self._known.get(text)
        if got is None:
            got = self._tok.encode(text)
            if len(self._known) < _MAX_KNOWN:
                self._known[text] = got
        return got

    def _settle(self, n: int, a: int, i1: int, ik: int, head: list[int], sstr: str,
                sids: list[int]) -> Fitted:
        """`TextMaker._settle` for the window from character `a` of the long text whose body
        is the text from `a` to bound `ik` + `sstr`, encoded as `head` (up to bound `i1`) +
        the stretches from bound `i1` to `ik` + `sids`."""
        tok, enc, maker = self._tok, self._enc, self._maker
        text, bounds, flat, starts = self._text, self._bounds, self._flat, self._starts
        s1, hl = starts[i1], len(head)
        for attempt in range(_FRESH_EVERY):
            j = hl + starts[ik] - s1  # tokens before bound ik
            have = j + len(sids)
            if have == n:
                return Fitted(text[a:bounds[ik]] + sstr, head + flat[s1:starts[ik]] + sids)
            if attempt == _FRESH_EVERY - 1:
                break
            if have > n:
                if n > j:
                    # decode(full[:n]) == body to bound ik + decode(sids[:n - j]): the
                    # tokens before a bound are whole UTF-8
                    cut = ik
                    sstr = tok.decode(sids[:n - j])
                else:  # the cut falls before bound ik: from the last bound before the cut
                    cut = bisect_left(starts, n - hl + s1, i1, ik + 1) - 1
                    sstr = tok.decode(flat[starts[cut]:n - hl + s1]) if cut >= i1 else ""
                if not sstr.startswith(" ") or not enc.clean(sstr):
                    full = head + flat[s1:starts[ik]] + sids
                    return maker.resume(n, full[:n], attempt + 1)
                ik = cut
            else:
                drawn = maker.random_ids(n - have)
                # decode(full + drawn) == body + the drawn tokens' own texts
                sstr = sstr + "".join([maker.text_by_id[t] for t in drawn])
                if not enc.clean(sstr):
                    return maker.resume(n, head + flat[s1:starts[ik]] + sids + drawn, attempt + 1)
            sids = self._encode(sstr)
        # the 16th try missed too: `TextMaker._settle` starts again from fresh ids
        return maker.resume(n, maker.random_ids(n), _FRESH_EVERY)
