"""The `sonnet` dataset: prompts made of lines of a text file, as vLLM's SonnetDataset made them.

`vllm bench serve` dropped sonnet from its parser (0.32.0 has no `--dataset-name sonnet`);
servelab keeps it with the last flags vLLM had: `--sonnet-input-len` 550,
`--sonnet-output-len` 150, `--sonnet-prefix-len` 200 (tokens). The file (vLLM shipped
`benchmarks/sonnet.txt`, Shakespeare's sonnets) is read as lines; every prompt is
"Pick as many lines as you can from these poem lines:\\n", then the file's first lines
(enough for about `--sonnet-prefix-len` tokens, shared by every prompt, so a prefix cache
sees them), then randomly chosen lines up to about `--sonnet-input-len` tokens; a draw
longer than `--sonnet-input-len` is drawn again. vLLM counted the prompt after applying the
chat template; servelab has none (see custom.py), so it counts the prompt as sent.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.errors import ServelabError
from servelab.workload.filelines import require_file
from servelab.workload.synthetic import request_spec

if TYPE_CHECKING:
    from servelab.workload.request import RequestSpec
    from servelab.workload.tokenizer import TokenizerHandle

BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"
DEFAULT_INPUT_LEN = 550
DEFAULT_OUTPUT_LEN = 150
DEFAULT_PREFIX_LEN = 200
# Redraws allowed per request before giving up: a draw is refused only when its lines
# are longer than average, so a sane file needs a handful.
_TRIES_PER_REQUEST = 100


def read_lines(path: Path) -> list[str]:
    """The file's lines, newlines kept (they are part of the prompt, as in vLLM)."""
    require_file(path, "sonnet")
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError as exc:
        raise ServelabError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if not any(line.strip() for line in lines):
        raise ServelabError(f"{path}: no text lines for --dataset-name sonnet")
    return lines


def sonnet_requests(
    lines: list[str],
    path: Path,
    tok: TokenizerHandle,
    *,
    num_prompts: int,
    input_len: int,
    output_len: int,
    prefix_len: int,
    seed: int,
    use_chat: bool,
) -> list[RequestSpec]:
    """`num_prompts` prompts of at most `input_len` tokens sharing the file's opening lines."""
    avg_len = sum(len(ids) for ids in tok.encode_batch(lines)) / len(lines)
    base_offset = tok.count(BASE_PROMPT)
    if input_len <= base_offset:
        raise ServelabError(
            f"--sonnet-input-len {input_len}: must exceed the base prompt's {base_offset} tokens"
        )
    if prefix_len > input_len:
        raise ServelabError(
            f"--sonnet-prefix-len {prefix_len}: must not exceed --sonnet-input-len {input_len}"
        )
    num_input_lines = round((input_len - base_offset) / avg_len)
    num_prefix_lines = max(round((prefix_len - base_offset) / avg_len), 0)
    prefix = "".join(lines[:num_prefix_lines])
    rng = random.Random(seed)
    out: list[RequestSpec] = []
    tries = 0
    while len(out) < num_prompts:
        tries += 1
        if tries > _TRIES_PER_REQUEST * num_prompts:
            raise ServelabError(
                f"{path}: could not draw prompts of at most --sonnet-input-len {input_len} "
                f"tokens (lines average {avg_len:.1f} tokens); raise --sonnet-input-len"
            )
        extra = rng.choices(lines, k=max(num_input_lines - num_prefix_lines, 0))
        prompt = BASE_PROMPT + prefix + "".join(extra)
        n = tok.count(prompt)
        if n <= input_len:
            out.append(request_spec(len(out), prompt, n, output_len, use_chat))
    return out
