r"""Exact encodings spliced from parts: for a byte-level BPE tokenizer of a known pipeline,
`encode(a + b) == encode(a) + encode(b)` whenever the join is a *forced boundary*, so texts
that share long stretches need only the stretches around their ends encoded again.

The pipeline (`SpliceEncoder.for_tokenizer` checks the tokenizer.json for exactly this; any
other tokenizer gets None and its callers encode whole texts): no normalizer, no truncation,
special added tokens only (none of whose contents holds a space), the pre-tokenizer
`Sequence[Split(QWEN2_PATTERN, Isolated), ByteLevel(use_regex=False)]`, a BPE model without
dropout and with a token for each of the 256 bytes, a ByteLevel decoder. The built-in
servelab-bpe-32k has it (Qwen2's own tokenizers add an NFC normalizer, so they do not).

Why the split is exact (the proof the speed rests on). Such a tokenizer encodes a text that
holds no added token's content as the concatenation, over the regex's matches in order, of
the BPE of each match's bytes. Every character is of one class: a letter (\p{L}), a number
(\p{N}), whitespace (\s) or other, and each class has an alternative matching one such
character, so the matches tile the text and each starts where the last ended. A forced
boundary is a position q whose previous character is an ASCII letter or digit and whose
character is a space (`_FORCED`). No alternative can match a letter or digit followed by a
space: the contractions are an apostrophe and letters; `[^\r\n\p{L}\p{N}]?\p{L}+` has only
letters after its optional first character; `\p{N}` is one character;
`' ?[^\s\p{L}\p{N}]+[\r\n]*'` holds no letter or digit; the last three only whitespace. So
every match that starts before q ends at or before q; the only lookahead, `(?!\S)`, follows
whitespace, so no such match looks at q either, and the end of the text at q would not
admit a match that the character at q refused (`\s+(?!\S)` again, after whitespace only).
The matches before q are therefore those of the text cut at q, and since the pattern looks
at nothing before a match's start, the matches from q on are those of the text from q on.
Hence the matches of `a + b` are those of `a` then those of `b`, and so their encodings.

Decoding splices too: the ByteLevel decoder turns ids into bytes and decodes them as UTF-8,
replacing invalid sequences, so `decode(x + y) == decode(x) + decode(y)` when the bytes of x
are complete UTF-8 (the encoding of a text always is).
"""

from __future__ import annotations

import re
from typing import Any

from tokenizers.pre_tokenizers import ByteLevel

from servelab.workload.tokenizer import TokenizerHandle

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_FORCED = re.compile(r"(?<=[A-Za-z0-9]) ")


def _known_pipeline(cfg: dict[str, Any]) -> bool:
    pre = cfg.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    model = cfg.get("model") or {}
    added = cfg.get("added_tokens") or []
    return (cfg.get("normalizer") is None and cfg.get("truncation") is None
            and steps is not None and len(steps) == 2
            and steps[0] == {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN},
                             "behavior": "Isolated", "invert": False}
            and steps[1].get("type") == "ByteLevel" and steps[1].get("use_regex") is False
            and steps[1].get("add_prefix_space") is False
            and model.get("type") == "BPE" and model.get("dropout") is None
            and (cfg.get("decoder") or {}).get("type") == "ByteLevel"
            and all(t.get("special") and " " not in t.get("content", " ") for t in added))


class SpliceEncoder:
    """The forced boundaries of texts and whether a text holds an added token's content,
    for a tokenizer whose pipeline makes splicing exact (see the module docstring)."""

    __slots__ = ("tok", "_added")

    def __init__(self, tok: TokenizerHandle, added: tuple[str, ...]) -> None:
        self.tok = tok
        self._added = re.compile("|".join(map(re.escape, added))) if added else None

    @classmethod
    def for_tokenizer(cls, tok: TokenizerHandle) -> SpliceEncoder | None:
        """The encoder for `tok`, or None when its pipeline is not the one the proof covers."""
        cfg = tok.config()
        # every byte must have its token, or encoding would drop it and decoding an
        # encoding would not give the text back
        if not _known_pipeline(cfg) or any(tok.token_id(c) is None for c in ByteLevel.alphabet()):
            return None
        return cls(tok, tuple(t["content"] for t in cfg.get("added_tokens") or []))

    def clean(self, text: str) -> bool:
        """True when `text` holds no added token's content (the encoder would cut it out)."""
        return self._added is None or self._added.search(text) is None

    @staticmethod
    def forced_boundaries(text: str) -> list[int]:
        """The positions (characters) of `text`'s forced boundaries, ascending."""
        return [m.start() for m in _FORCED.finditer(text)]

