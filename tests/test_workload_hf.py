"""`--dataset-name hf` on local files: the layouts it reads, the ones it refuses, no hub."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
WORDS = load_tokenizer(str(DATA / "wordlevel_tokenizer.json"))


def _hf(path: Path, **kw) -> object:
    opts = DatasetOptions(dataset_name="hf", dataset_path=path,
                          **{"num_prompts": 2, "disable_shuffle": True, **kw})
    return build_workload(opts, WORDS, 0)


def _words(n: int) -> str:
    return " ".join(["w"] * n)


def test_sharegpt_style_conversations(tmp_path: Path) -> None:
    path = tmp_path / "conv.json"
    path.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": _words(5)},
                                      {"from": "gpt", "value": _words(7)}]},
        {"id": "b", "conversations": [{"from": "human", "value": _words(3)}]},  # < 2 turns
        {"id": "c", "conversations": [{"from": "human", "value": _words(4)},
                                      {"from": "gpt", "value": _words(2)}]},  # answer < 4
        {"id": "d", "conversations": [{"from": "human", "value": _words(6)},
                                      {"from": "gpt", "value": _words(9)}]},
    ]), encoding="utf-8")
    wl = _hf(path, hf_name="Aeala/ShareGPT_Vicuna_unfiltered")
    assert [(r.prompt, r.prompt_len, r.output_len) for r in wl.requests] == [
        (_words(5), 5, 7), (_words(6), 6, 9)]
    assert any("(Aeala/ShareGPT_Vicuna_unfiltered): 3 records" in n for n in wl.notes)
    fixed = _hf(path, hf_output_len=3, num_prompts=3)  # a fixed length skips the filter
    assert [(r.prompt_len, r.output_len) for r in fixed.requests] == [(5, 3), (4, 3), (6, 3)]


def test_messages_layout_sends_the_turns_before_the_first_answer(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = [{"messages": [{"role": "system", "content": _words(2)},
                          {"role": "user", "content": _words(4)},
                          {"role": "assistant", "content": _words(5)}], "source": "x"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    [req] = _hf(path, num_prompts=1).requests
    assert [(m.role, m.content) for m in req.messages] == [("system", _words(2)), ("user", _words(4))]
    assert (req.prompt_len, req.output_len) == (6, 5)


def test_instruction_output_with_splits_in_a_folder(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    for split, n in (("train", 4), ("test", 8)):
        rows = [{"instruction": _words(n), "input": "hello", "output": _words(n + 1)}]
        (root / "data" / f"{split}-00000-of-00001.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    [req] = _hf(root, hf_split="test", num_prompts=1).requests
    assert req.prompt == _words(8) + "\nhello" and (req.prompt_len, req.output_len) == (9, 9)
    with pytest.raises(ServelabError, match="2 data files .* pick one with --hf-split"):
        _hf(root)


def test_json_object_of_splits(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"train": [{"prompt": _words(4), "output": _words(4)}],
                                "validation": [{"prompt": _words(5), "response": _words(6)}]}))
    [req] = _hf(path, hf_split="validation", num_prompts=1).requests
    assert (req.prompt_len, req.output_len) == (5, 6)
    with pytest.raises(ServelabError, match=r"splits \(train, validation\); pick one with --hf-split"):
        _hf(path)


def test_other_layouts_are_refused_naming_file_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n', encoding="utf-8")
    with pytest.raises(ServelabError) as info:
        _hf(path)
    msg = str(info.value)
    assert f"{path}:1: not a layout servelab reads" in msg and "keys found: answer, question" in msg
    assert "\n" not in msg


def test_a_hub_id_says_servelab_reads_local_files_only() -> None:
    with pytest.raises(ServelabError) as info:
        _hf(Path("lmarena-ai/VisionArena-Chat"))
    assert "servelab reads local dataset files only" in str(info.value)


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow is installed")
def test_parquet_without_pyarrow_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(ServelabError, match="reading Parquet needs pyarrow"):
        _hf(path)
