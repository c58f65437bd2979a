"""vLLM's `custom` dataset: a JSON Lines file of prompts, one object per line.

Each line holds `prompt` (a string) and, optionally, `output_tokens` (vLLM's key, used only
when `--custom-output-len -1`); other keys are ignored, as vLLM's pandas reader ignores
other columns (so `servelab data inspect --save-samples` output loads as-is). As in
`vllm bench serve`: the file must end in `.jsonl`, lines are shuffled with the seed unless
`--disable-shuffle`, the first `--num-prompts` are taken, and a shorter file is oversampled.

vLLM applies the model's chat template to each prompt client-side unless
`--skip-chat-template`; servelab's tokenizers carry no template, so prompts are always sent
as written (a chat backend's server applies its own template) and `prompt_len` counts the
prompt alone. A note says so.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.errors import ServelabError
from servelab.workload.filelines import int_field, json_lines, require_file
from servelab.workload.oversample import oversample
from servelab.workload.synthetic import request_spec

if TYPE_CHECKING:
    from servelab.workload.request import RequestSpec
    from servelab.workload.tokenizer import TokenizerHandle

USE_FILE_OUTPUT_LEN = -1


@dataclass(frozen=True, slots=True)
class PromptLine:
    """One prompt of a file: its text, the output length the file gives (or None), and
    where it came from (for error messages)."""

    prompt: str
    output_tokens: int | None
    lineno: int


def read_custom(path: Path) -> list[PromptLine]:
    """Every line of a custom JSONL file, in file order."""
    require_file(path, "custom")
    if path.suffix != ".jsonl":
        raise ServelabError(
            f"--dataset-path {path}: --dataset-name custom reads JSON Lines files ending in "
            ".jsonl, as vllm bench serve does"
        )
    out = []
    for lineno, obj in json_lines(path):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            raise ServelabError(
                f"{path}:{lineno}: 'prompt' must be a string "
                f"(keys found: {', '.join(sorted(obj)) or 'none'})"
            )
        out_tokens = obj.get("output_tokens")
        if out_tokens is not None:
            out_tokens = int_field(path, lineno, "output_tokens", out_tokens, 1)
        out.append(PromptLine(prompt, out_tokens, lineno))
    if not out:
        raise ServelabError(f"{path}: no prompts (the file has no non-blank lines)")
    return out


def sample_prompts(
    lines: list[PromptLine],
    path: Path,
    tok: TokenizerHandle,
    *,
    num_prompts: int,
    output_len: int,
    flag: str,
    seed: int,
    disable_shuffle: bool,
    no_oversample: bool,
    use_chat: bool,
) -> tuple[list[RequestSpec], list[str]]:
    """vLLM's CustomDataset.sample: shuffle (unless `disable_shuffle`), take `num_prompts`,
    output length `output_len` or, when it is -1, each line's `output_tokens`; then top up.

    `flag` names the output-length flag in errors (`--custom-output-len`...).
    """
    order = list(lines)
    if not disable_shuffle:
        # random.Random(seed).shuffle draws as vLLM's random.seed(seed); random.shuffle.
        random.Random(seed).shuffle(order)
    chosen = order[:num_prompts]
    lens = []
    for line in chosen:
        if output_len != USE_FILE_OUTPUT_LEN:
            lens.append(output_len)
        elif line.output_tokens is None:
            raise ServelabError(
                f"{path}:{line.lineno}: no 'output_tokens', which {flag} -1 asks the file for"
            )
        else:
            lens.append(line.output_tokens)
    counts = [len(ids) for ids in tok.encode_batch([line.prompt for line in chosen])]
    requests = [
        request_spec(i, line.prompt, n, out, use_chat)
        for i, (line, n, out) in enumerate(zip(chosen, counts, lens))
    ]
    requests, notes = oversample(requests, num_prompts, seed, no_oversample=no_oversample,
                                 source=str(path))
    order_note = "file order (--disable-shuffle)" if disable_shuffle else f"shuffled with seed {seed}"
    return requests, [f"{path}: {len(lines):,} prompts, {order_note}", *notes]


TEMPLATE_NOTE = (
    "no chat template is applied client-side (vllm bench serve applies the model's unless "
    "--skip-chat-template; servelab's tokenizers carry none): prompts go as written, and "
    "--backend openai-chat has the server apply its template"
)
