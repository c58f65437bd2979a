"""What vLLM 0.25.1's detokenizer costs per output when the model emits ids its tokenizer
does not have (issue 14, 2026-12-06): the kit serves gemma-3-12b (vocabulary 262,208) with
the kit's Qwen tokenizer (151,669 ids), and a dummy-weight model's greedy tokens then fall
beyond the tokenizer.

    .venv/bin/python docs/validation/sim-detok-2026-12-06/detok.py [TOKENIZER_JSON]

Times what `FastIncrementalDetokenizer` does per request (vllm/v1/engine/detokenizer.py):
a `tokenizers.decoders.DecodeStream` primed with the prompt's ids, then one `step` per
output id. Per prompt length, 128 outputs: ids in the tokenizer's vocabulary, ids drawn over
gemma's whole vocabulary, and ids beyond the tokenizer (one id repeated, as a greedy dummy
model tends to emit, and random ones). Prints us per output (median of 20 requests).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

# the served gemma's config (../sim-transfer-2026-12-01), whose vocabulary the kit kept
GEMMA_VOCAB = int(json.loads((Path(__file__).resolve().parent.parent / "sim-transfer-2026-12-01" / "results"
                              / "gemma-3-12b" / "config.json").read_text())["vocab_size"])
OUTPUTS = 128
REPS = 20


def per_output_us(tok: Tokenizer, prompt: list[int], ids: list[int]) -> float:
    stream = DecodeStream(ids=prompt, skip_special_tokens=True)
    t = time.perf_counter()
    for i in ids:
        stream.step(tok, i)
    return (time.perf_counter() - t) / len(ids) * 1e6


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else ".gpu/dl/payload/qwen3-14b/tokenizer.json")
    tok = Tokenizer.from_file(str(path))
    vocab = tok.get_vocab_size()
    rng = random.Random(0)
    kinds = {
        "in the tokenizer's vocabulary": lambda: rng.randrange(100, 50_000),
        "over gemma's vocabulary": lambda: rng.randrange(0, GEMMA_VOCAB),
        "beyond the tokenizer, one id": lambda: 200_000,
        "beyond the tokenizer, random": lambda: rng.randrange(vocab, GEMMA_VOCAB),
    }
    print(f"tokenizers {tokenizers.__version__}, {path.name}: {vocab:,} ids; {OUTPUTS} outputs a "
          f"request, median of {REPS} requests, us per output\n")
    lengths = (128, 512, 1024, 2048)
    print("| emitted ids | " + " | ".join(f"prompt {n:,}" for n in lengths) + " |")
    print("|---|" + "---:|" * len(lengths))
    for label, draw in kinds.items():
        cells = []
        for n in lengths:
            prompt = [rng.randrange(100, 50_000) for _ in range(n)]
            cells.append(statistics.median(per_output_us(tok, prompt, [draw() for _ in range(OUTPUTS)])
                                           for _ in range(REPS)))
        print(f"| {label} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
