"""jsonl: prompts and chats from the user's file; errors name file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.inspect import save_samples
from servelab.workload.tokenizer import load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
WORDS = load_tokenizer(str(DATA / "wordlevel_tokenizer.json"))


def _build(path: Path, **kw):
    opts = DatasetOptions(dataset_name="jsonl", dataset_path=path, **kw)
    return build_workload(opts, WORDS, seed=0)


def test_reads_prompts_and_messages_in_file_order() -> None:
    wl = _build(DATA / "inspect_requests.jsonl", jsonl_output_len=30, num_prompts=10)
    assert [(r.prompt_len, r.output_len) for r in wl.requests] == [
        (2, 10), (4, 20), (6, 40), (30, 30), (8, 100)]
    chat = wl.requests[2]
    assert chat.prompt is None and [m.role for m in chat.messages] == ["system", "user"]
    assert [r.index for r in wl.requests] == [0, 1, 2, 3, 4]
    assert any("asked for more requests than" in n for n in wl.notes)


def test_takes_the_first_num_prompts() -> None:
    wl = _build(DATA / "inspect_requests.jsonl", num_prompts=2)
    assert [r.prompt_len for r in wl.requests] == [2, 4]
    assert not any("asked for more" in n for n in wl.notes)


def test_use_chat_wraps_prompts() -> None:
    wl = _build(DATA / "inspect_requests.jsonl", num_prompts=1, use_chat=True)
    assert wl.requests[0].messages[0].content == "w w"


@pytest.mark.parametrize(
    "lines, lineno, needle",
    [
        (['{"prompt": "a"}', "", '{"prompt": "b",}'], 3, "not valid JSON"),
        (['["prompt"]'], 1, "expected a JSON object, found list"),
        (['{"prompt": "a"}', '{"text": "b"}'], 2, "exactly one of 'prompt'"),
        (['{"prompt": "a", "messages": []}'], 1, "exactly one of 'prompt'"),
        (['{"prompt": 5}'], 1, "'prompt' must be a string"),
        (['{"prompt": "a", "output_len": 0}'], 1, "'output_len' must be an integer >= 1"),
        (['{"prompt": "a", "output_len": "5"}'], 1, "'output_len' must be an integer"),
        (['{"prompt": "a", "output_len": true}'], 1, "'output_len' must be an integer"),
        (['{"messages": []}'], 1, "non-empty list"),
        (['{"messages": [{"role": "robot", "content": "x"}]}'], 1, "messages[0].role"),
        (['{"messages": [{"role": "user", "content": 1}]}'], 1, "messages[0].content"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, lines: list[str], lineno: int, needle: str) -> None:
    path = tmp_path / "reqs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ServelabError) as info:
        _build(path)
    assert f"{path}:{lineno}: " in str(info.value)
    assert needle in str(info.value)


def test_empty_and_missing_and_binary(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ServelabError, match="no requests"):
        _build(empty)
    with pytest.raises(ServelabError, match="no such file"):
        _build(tmp_path / "absent.jsonl")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"prompt": "a"}\n\xff\xfe\n')
    with pytest.raises(ServelabError, match=r"bin.jsonl:2: not UTF-8"):
        _build(binary)


def test_saved_samples_load_back(tmp_path: Path) -> None:
    wl = _build(DATA / "inspect_requests.jsonl", jsonl_output_len=30)
    out = tmp_path / "samples.jsonl"
    save_samples(wl, out)
    again = _build(out)
    assert again.requests == wl.requests
