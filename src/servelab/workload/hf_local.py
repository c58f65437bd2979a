"""`--dataset-name hf` for local dataset files: JSON, JSON Lines or Parquet, never the hub.

`vllm bench serve --dataset-name hf` downloads a dataset by its hub ID and picks a loader by
that ID; servelab has no network and no `datasets` package, so it reads a local file (or a
folder downloaded from the hub, e.g. `huggingface-cli download --repo-type dataset ID
--local-dir DIR`) and recognises the record layout by its keys:

| layout | prompt | answer (sizes the output unless `--hf-output-len`) |
|---|---|---|
| `conversations` (ShareGPT: `from`/`value`, or `role`/`content`) | turn 0 | turn 1 (vLLM's ConversationDataset) |
| `messages` (`role`/`content`) | the messages before the first assistant one, as chat | the first assistant message |
| `prompt` or `instruction` (+ `input`) | the text (instruction, newline, input) | `output`, `response` or `completion` |

Anything else is refused, naming the file and the keys found. Dataset records carry any
columns besides these, so records are read by key rather than with a closed schema.
`--hf-split` picks a split (a top-level key of a JSON object, or the data file of a folder
whose name starts with it); `--hf-subset` a folder's subfolder; `--hf-name` only labels
the data. Then as vLLM: shuffle with the seed unless `--disable-shuffle`, drop pairs that
fail vLLM's length filter when the answer sizes the output, take `--num-prompts`, oversample.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servelab.errors import ServelabError
from servelab.workload.filelines import json_lines
from servelab.workload.request import ChatMessage, RequestSpec
from servelab.workload.sharegpt import is_valid_pair

if TYPE_CHECKING:
    from servelab.workload.tokenizer import TokenizerHandle

SUFFIXES = (".jsonl", ".json", ".parquet")
_ANSWER_KEYS = ("output", "response", "completion")
_LAYOUTS = "conversations, messages, prompt/instruction + output"


@dataclass(frozen=True, slots=True)
class HfRecord:
    """One usable record: the prompt (text or chat turns), its answer if any, and where."""

    messages: tuple[ChatMessage, ...]
    answer: str | None
    where: str  # "FILE:LINE" or "FILE: record N", for error messages


def _is_hub_id(text: str) -> bool:
    return (text.count("/") == 1 and not text.startswith((".", "/", "~"))
            and not text.endswith(SUFFIXES))


def resolve_data_file(path: Path, subset: str | None, split: str | None) -> Path:
    """The one data file that `path` (a file or a folder), `subset` and `split` name."""
    if not path.exists():
        if _is_hub_id(str(path)):
            raise ServelabError(
                f"--dataset-path {path}: no such local file or folder; servelab reads local "
                f"dataset files only (no hub access): download it first (huggingface-cli "
                f"download --repo-type dataset {path} --local-dir DIR) and pass DIR"
            )
        raise ServelabError(f"--dataset-path {path}: no such file or folder (--dataset-name hf)")
    if path.is_file():
        if path.suffix not in SUFFIXES:
            raise ServelabError(f"--dataset-path {path}: --dataset-name hf reads "
                                f"{', '.join(SUFFIXES)} files")
        return path
    root = path / subset if subset else path
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if split is not None:
        files = [p for p in files if p.name.startswith(split) or split in p.relative_to(root).parts[:-1]]
    if len(files) == 1:
        return files[0]
    what = f"{root}" + (f" (split {split})" if split else "")
    if not files:
        raise ServelabError(f"--dataset-path {what}: no {', '.join(SUFFIXES)} data file found")
    names = ", ".join(str(p.relative_to(root)) for p in files[:6])
    raise ServelabError(f"--dataset-path {what}: {len(files)} data files ({names}); pick one "
                        "with --hf-split/--hf-subset or pass the file")


def _raw_records(path: Path, split: str | None) -> Iterator[tuple[str, dict]]:
    if path.suffix == ".jsonl":
        for lineno, obj in json_lines(path):
            yield f"{path}:{lineno}", obj
        return
    if path.suffix == ".parquet":
        if importlib.util.find_spec("pyarrow") is None:
            raise ServelabError(f"--dataset-path {path}: reading Parquet needs pyarrow "
                                "(pip install pyarrow), or convert the file to .jsonl")
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ServelabError(f"{path}: not a JSON file ({exc})") from None
        if isinstance(data, dict):
            lists = {k: v for k, v in data.items() if isinstance(v, list)}
            if split is not None and split in lists:
                data = lists[split]
            elif split is None and len(lists) == 1:
                data = next(iter(lists.values()))
            else:
                raise ServelabError(
                    f"{path}: a JSON object of splits ({', '.join(lists) or 'none'}); "
                    + (f"--hf-split {split} is not one" if split else "pick one with --hf-split")
                )
        if not isinstance(data, list):
            raise ServelabError(f"{path}: expected a JSON array of records")
        rows = data
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise ServelabError(f"{path}: record {i} is not an object")
        yield f"{path}: record {i}", row


def _text(where: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ServelabError(f"{where}: {key!r} must be a string (got {type(value).__name__})")
    return value


def _conversation_turn(where: str, i: int, turn: object) -> str:
    if not isinstance(turn, dict):
        raise ServelabError(f"{where}: conversations[{i}] must be an object")
    key = "value" if "value" in turn else "content"
    return _text(where, f"conversations[{i}].{key}", turn.get(key))


def _record(where: str, row: dict) -> HfRecord | None:
    """The record's prompt and answer; None when vLLM would skip it (< 2 turns)."""
    if "conversations" in row:
        conv = row["conversations"]
        if not isinstance(conv, list):
            raise ServelabError(f"{where}: 'conversations' must be a list")
        if len(conv) < 2:
            return None
        first, second = _conversation_turn(where, 0, conv[0]), _conversation_turn(where, 1, conv[1])
        return HfRecord((ChatMessage("user", first),), second, where)
    if "messages" in row:
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise ServelabError(f"{where}: 'messages' must be a non-empty list")
        prompt: list[ChatMessage] = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
                raise ServelabError(f"{where}: messages[{i}] needs a role of system, user or assistant")
            content = _text(where, f"messages[{i}].content", m.get("content"))
            if m["role"] == "assistant":
                return HfRecord(tuple(prompt), content, where) if prompt else None
            prompt.append(ChatMessage(m["role"], content))
        return HfRecord(tuple(prompt), None, where)
    for key in ("prompt", "instruction"):
        if key in row:
            text = _text(where, key, row[key])
            extra = row.get("input")
            if key == "instruction" and isinstance(extra, str) and extra:
                text = f"{text}\n{extra}"
            answer = next((row[k] for k in _ANSWER_KEYS if k in row), None)
            answer = None if answer is None else _text(where, "output", answer)
            return HfRecord((ChatMessage("user", text),), answer, where)
    raise ServelabError(
        f"{where}: not a layout servelab reads ({_LAYOUTS}); keys found: "
        f"{', '.join(sorted(row)) or 'none'}"
    )


def read_hf(path: Path, subset: str | None, split: str | None) -> tuple[Path, list[HfRecord]]:
    """The data file `path`/`subset`/`split` name and its usable records, in file order."""
    data_file = resolve_data_file(path, subset, split)
    records = [r for where, row in _raw_records(data_file, split)
               if (r := _record(where, row)) is not None]
    if not records:
        raise ServelabError(f"{data_file}: no record with a prompt and an answer")
    return data_file, records


def sample_hf(
    records: list[HfRecord],
    tok: TokenizerHandle,
    rng: np.random.Generator,
    *,
    num_prompts: int,
    output_len: int | None,
    disable_shuffle: bool,
    use_chat: bool,
) -> list[RequestSpec]:
    """Up to `num_prompts` requests: shuffled unless `disable_shuffle`, filtered as vLLM's
    ConversationDataset filters when the answer sizes the output."""
    order = records if disable_shuffle else [records[i] for i in rng.permutation(len(records))]
    out: list[RequestSpec] = []
    for rec in order:
        if len(out) == num_prompts:
            break
        text = "\n".join(m.content for m in rec.messages)
        prompt_len = tok.count(text)
        if output_len is None:
            if rec.answer is None:
                raise ServelabError(f"{rec.where}: no answer to size the output; pass --hf-output-len")
            out_len = tok.count(rec.answer)
            if not is_valid_pair(prompt_len, out_len, fixed_output=False):
                continue
        else:
            out_len = output_len
        chat = use_chat or len(rec.messages) > 1 or rec.messages[0].role != "user"
        if chat:
            out.append(RequestSpec(len(out), None, rec.messages, prompt_len, out_len))
        else:
            out.append(RequestSpec(len(out), text, None, prompt_len, out_len))
    return out
