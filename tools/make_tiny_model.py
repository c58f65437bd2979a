"""Write a tiny random-weight Qwen3 model directory for the CPU build of vLLM (no model hub).

    python tools/make_tiny_model.py OUT_DIR [--seed 0]

OUT_DIR gets config.json (Qwen3ForCausalLM: 2 layers, hidden 128, 4 heads, 2 KV heads,
head_dim 32, vocab 4096, 4096 positions, bf16), tokenizer.json (a byte-level BPE of 4096
tokens trained here with `tokenizers` on text drawn from servelab's built-in tokenizer's
vocabulary with a seeded RNG), tokenizer_config.json (ChatML template, eos <|im_end|>) and
generation_config.json. There are no weight files: serve it with `--load-format dummy`.
The same seed writes the same files.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from servelab.workload.tokenizer import load_tokenizer

VOCAB_SIZE = 4096
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def corpus(seed: int, sentences: int = 20000) -> list[str]:
    """Sentences of words taken from the built-in tokenizer's vocabulary (seeded)."""
    builtin = load_tokenizer(None)
    words = sorted({w.strip() for w in builtin.decode_each(range(builtin.info.vocab_size))
                    if re.fullmatch(r" ?[A-Za-z]{2,12}", w)})
    rng = random.Random(seed)
    lines = []
    for _ in range(sentences):
        n = rng.randint(6, 24)
        text = " ".join(rng.choice(words) for _ in range(n))
        lines.append(text[0].upper() + text[1:] + rng.choice([".", ".", "?", "!", ",", ":"]))
    return lines


def train_tokenizer(lines: list[str]) -> Tokenizer:
    """A byte-level BPE of VOCAB_SIZE tokens, the special tokens first."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return tok


def model_config(eos_id: int, bos_id: int) -> dict:
    """Qwen3 geometry of ../shared/ENGINES.md: 2 layers, 128 hidden, 2 KV heads x 32."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "initializer_range": 0.02,
        "use_cache": True,
    }


def write_model_dir(out: Path, seed: int = 0) -> Path:
    """Write the four files into `out` (created if needed); return `out`."""
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(corpus(seed))
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"trained {tok.get_vocab_size()} tokens, wanted {VOCAB_SIZE}")
    eos_id = tok.token_to_id("<|im_end|>")
    bos_id = tok.token_to_id("<|endoftext|>")
    tok.save(str(out / "tokenizer.json"))
    files = {
        "config.json": model_config(eos_id, bos_id),
        "generation_config.json": {"bos_token_id": bos_id, "eos_token_id": eos_id},
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "bos_token": None,
            "model_max_length": 4096,
            "chat_template": CHAT_TEMPLATE,
        },
    }
    for name, data in files.items():
        (out / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the training text")
    args = parser.parse_args()
    print(write_model_dir(args.out, args.seed))


if __name__ == "__main__":
    main()
