"""Splicing encodings at forced boundaries gives the tokenizer's own encoding, and the
window fitter gives `TextMaker.fit`'s texts, ids and draws (`servelab.workload.splice`,
`servelab.workload.textfit`)."""

from __future__ import annotations

import json
import random
from array import array

import numpy as np
import pytest
from tokenizers import Tokenizer

from servelab.workload.splice import SpliceEncoder
from servelab.workload.textfit import Fitted, TextMaker, WindowFitter
from servelab.workload.tokenizer import TokenizerHandle, TokenizerInfo, load_tokenizer

# Every character class of the pattern and its edges: letters (ASCII and not), digits,
# apostrophes (contractions), spaces, tabs, newlines, punctuation, marks, CJK, emoji,
# and the added token's content.
_POOL = list("abcXYZ019") + [" ", " ", "  ", "\t", "\n", "\r\n", " \n ", "'", "'s", "'LL",
                              ".", "(", "-", "\\", "é", "ß", "\u0301", "中文", "٣", "😀",
                              "<|endoftext|>", "\u00a0", "\u2003"]


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_POOL) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def test_encoding_splits_at_every_forced_boundary() -> None:
    tok = load_tokenizer(None)
    enc = SpliceEncoder.for_tokenizer(tok)
    assert enc is not None
    checked = 0
    for text in _texts(0, 3000):
        whole = tok.encode(text)
        for q in enc.forced_boundaries(text):
            assert text[q - 1].isascii() and text[q - 1].isalnum() and text[q] == " "
            if enc.clean(text):
                assert tok.encode(text[:q]) + tok.encode(text[q:]) == whole, repr((text, q))
                checked += 1
    assert checked > 1000


def test_clean_sees_the_added_token() -> None:
    enc = SpliceEncoder.for_tokenizer(load_tokenizer(None))
    assert enc is not None
    assert enc.clean("plain text") and not enc.clean("a<|endoftext|>b")


def _variant(change: dict) -> TokenizerHandle:
    cfg = json.loads(load_tokenizer(None)._tok.to_str())
    cfg.update(change)
    return TokenizerHandle(Tokenizer.from_str(json.dumps(cfg)), TokenizerInfo("variant", "test", 0))


@pytest.mark.parametrize("change", [
    {"normalizer": {"type": "NFC"}},
    {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                       "use_regex": True}},
])
def test_other_pipelines_are_not_spliced(change: dict) -> None:
    assert SpliceEncoder.for_tokenizer(_variant(change)) is None


@pytest.mark.parametrize("seed", range(4))
def test_window_fitter_gives_fit_for_every_window(seed: int) -> None:
    """Random windows (short, long, wrapping past the alphabet's end, empty): the same
    fitted text and ids as `TextMaker.fit` on the window's ids, and the same generator
    state after."""
    tok = load_tokenizer(None)
    ref, fast = TextMaker(tok, np.random.default_rng(seed)), TextMaker(tok, np.random.default_rng(seed))
    fitter = WindowFitter.build(fast, tok)
    assert fitter is not None
    period = len(ref.alphabet)
    rng = random.Random(seed)
    cases = [(rng.randrange(period), rng.choice([0, 1, 2, 5, 17, 64, 220, 418, 1500]))
             for _ in range(150)]
    cases += [(period - 1, 300), (period - 3, 2), (0, 0)]
    for start, n in cases:
        window = ref.alphabet[(start + np.arange(n)) % period].tolist()
        assert _plain(fitter.fit(start, n)) == ref.fit(n, None, window), (start, n)
    assert fast.random_ids(16) == ref.random_ids(16)


def _plain(fitted: Fitted) -> Fitted:
    """`fitted` with its ids as `TextMaker` gives them (a list), checking that the fitter
    gave them compactly: 2 bytes an id for the built-in tokenizer's 32,768 ids."""
    assert isinstance(fitted.ids, array) and fitted.ids.typecode == "H"
    return Fitted(fitted.text, fitted.ids.tolist())


def test_window_fitter_gives_fit_when_windows_meet_again() -> None:
    """What the fitter keeps (by window start, end and cut, and tails cut to k tokens) gives
    what fitting afresh gives: windows that share starts and ends, each fitted twice, in
    an order that meets every kept entry again, against `TextMaker.fit`."""
    tok = load_tokenizer(None)
    ref, fast = TextMaker(tok, np.random.default_rng(9)), TextMaker(tok, np.random.default_rng(9))
    fitter = WindowFitter.build(fast, tok)
    assert fitter is not None
    period = len(ref.alphabet)
    rng = random.Random(9)
    starts = [rng.randrange(period) for _ in range(6)] + [0, period - 1]
    cases = [(s, n) for s in starts for n in (1, 9, 30, 31, 32, 100, 220, 221, 419)]
    # shifting start and length together keeps the end: the same tail, other heads
    cases += [(s + d, 200 - d) for s in starts[:3] for d in range(0, 40, 3) if s + d < period]
    cases = cases + cases[::-1]
    rng.shuffle(cases)
    for start, n in cases:
        window = ref.alphabet[(start + np.arange(n)) % period].tolist()
        assert _plain(fitter.fit(start, n)) == ref.fit(n, None, window), (start, n)
    assert fast.random_ids(16) == ref.random_ids(16)


def test_window_fitter_falls_back_past_one_period() -> None:
    """A window longer than the alphabet is fitted by `TextMaker` itself, the same way."""
    tok = load_tokenizer(None)
    ref, fast = TextMaker(tok, np.random.default_rng(1)), TextMaker(tok, np.random.default_rng(1))
    fitter = WindowFitter.build(fast, tok)
    assert fitter is not None
    period = len(ref.alphabet)
    n = period + 7
    window = ref.alphabet[(5 + np.arange(n)) % period].tolist()
    assert _plain(fitter.fit(5, n)) == ref.fit(n, None, window)
