"""Tokenizers that count prompt and output tokens: a tokenizer.json, a model dir, or built-in.

Counts exclude special tokens a tokenizer's post-processor would add (a BOS, for example):
they measure the text itself, the way vLLM's random dataset counts. A server's reported
`prompt_tokens` can therefore exceed `prompt_len` by the template's and BOS's tokens.
"""

from __future__ import annotations

import gzip
import json
import importlib.resources
import importlib.util
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from servelab.errors import ServelabError

BUILTIN_NAME = "servelab-bpe-32k"
_BUILTIN_FILE = f"{BUILTIN_NAME}.json.gz"


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    """Which tokenizer counted a workload's tokens.

    `name` is what the user passed (or the built-in's name), `source` where the tokenizer was
    read from (a path, or `builtin:<file>`), `vocab_size` its vocabulary including added tokens.
    """

    name: str
    source: str
    vocab_size: int


class TokenizerHandle:
    """A loaded tokenizer: encode, decode and count without special tokens."""

    def __init__(self, tokenizer: Tokenizer, info: TokenizerInfo) -> None:
        self._tok = tokenizer
        self.info = info

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`[encode(t) for t in texts]`, in one call (on the tokenizer's threads)."""
        if self._tok.padding is not None:
            # A batch is padded to its longest text, which one text alone is not.
            return [self.encode(t) for t in texts]
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def decode_batch(self, seqs: Sequence[Sequence[int]]) -> list[str]:
        """`[decode(s) for s in seqs]`, in one call."""
        return self._tok.decode_batch([list(s) for s in seqs], skip_special_tokens=False)

    def count(self, text: str) -> int:
        """Number of tokens in `text`."""
        return len(self.encode(text))

    def special_ids(self) -> set[int]:
        """Ids of the added/special tokens (never used to build synthetic text)."""
        return {tok_id for tok_id, added in self._tok.get_added_tokens_decoder().items()
                if added.special}

    def token_id(self, token: str) -> int | None:
        """The id of vocabulary entry `token` (None: not in the vocabulary)."""
        return self._tok.token_to_id(token)

    def config(self) -> dict[str, Any]:
        """The tokenizer.json as a dict, without the model's vocabulary and merges."""
        cfg = json.loads(self._tok.to_str())
        model = cfg.get("model") or {}
        model.pop("vocab", None)
        model.pop("merges", None)
        return cfg

    def id_typecode(self) -> str:
        """The `array` typecode of the narrowest unsigned C type that holds every id of this
        tokenizer: 'H' (2 bytes) for the built-in's 32,768 ids, 'I' (4 bytes) for Qwen's
        151,669. Token ids kept by the hundred million (a million prompts) are stored so."""
        top = max(self._tok.get_vocab(with_added_tokens=True).values(), default=0)
        return next(c for c in "HIQ" if top < 1 << (8 * array(c).itemsize))

    def decode_each(self, ids: Sequence[int]) -> list[str]:
        """The text of each id on its own."""
        return self._tok.decode_batch([[i] for i in ids], skip_special_tokens=False)


def _from_file(path: Path, name: str) -> TokenizerHandle:
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust loader raises a bare Exception on bad JSON
        raise ServelabError(f"--tokenizer {name}: {path} is not a valid tokenizer.json ({exc})")
    return TokenizerHandle(tok, TokenizerInfo(name, str(path), tok.get_vocab_size()))


def _builtin() -> TokenizerHandle:
    resource = importlib.resources.files("servelab").joinpath("data", _BUILTIN_FILE)
    raw = gzip.decompress(resource.read_bytes()).decode("utf-8")
    tok = Tokenizer.from_str(raw)
    return TokenizerHandle(
        tok, TokenizerInfo(BUILTIN_NAME, f"builtin:{_BUILTIN_FILE}", tok.get_vocab_size())
    )


def _from_hf_cache(spec: str) -> TokenizerHandle:
    """A Hugging Face name, found only in the local cache (servelab never downloads)."""
    if importlib.util.find_spec("transformers") is None:
        raise ServelabError(
            f"--tokenizer {spec}: no such file or directory, and transformers is not installed "
            "to look it up as a Hugging Face name; pass a tokenizer.json or a model directory "
            "holding one (or pip install transformers)"
        )
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(spec, "tokenizer.json")
    if not isinstance(found, str):
        raise ServelabError(
            f"--tokenizer {spec}: not a file or directory, and the Hugging Face cache holds no "
            f"tokenizer.json for '{spec}' (servelab does not download); pass a tokenizer.json "
            "or a model directory"
        )
    return _from_file(Path(found), spec)


def load_tokenizer(spec: str | None) -> TokenizerHandle:
    """Load the tokenizer named by `--tokenizer`.

    `spec` is a tokenizer.json path, a model directory holding tokenizer.json, or a Hugging Face
    name already in the local cache (needs transformers). None gives the built-in
    `servelab-bpe-32k`. Raises ServelabError naming the spec and what was looked for.
    """
    if spec is None:
        return _builtin()
    path = Path(spec).expanduser()
    if path.is_dir():
        candidate = path / "tokenizer.json"
        if not candidate.is_file():
            raise ServelabError(
                f"--tokenizer {spec}: the directory holds no tokenizer.json "
                "(servelab reads Hugging Face fast-tokenizer files)"
            )
        return _from_file(candidate, spec)
    if path.is_file():
        return _from_file(path, spec)
    return _from_hf_cache(spec)
