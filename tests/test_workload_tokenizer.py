"""Tokenizer loading: built-in, tokenizer.json, model directory, and the errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.workload.tokenizer import BUILTIN_NAME, load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
WORDLEVEL = DATA / "wordlevel_tokenizer.json"


def test_builtin_tokenizer() -> None:
    tok = load_tokenizer(None)
    assert tok.info.name == BUILTIN_NAME == "servelab-bpe-32k"
    assert tok.info.vocab_size == 32768
    assert tok.info.source == "builtin:servelab-bpe-32k.json.gz"
    text = "Summarize the main ideas of Jeff Walker's Product Launch Formula. 東京 café 12345"
    ids = tok.encode(text)
    assert tok.decode(ids) == text  # byte-level: lossless
    assert tok.count(text) == len(ids)
    assert 10 < len(ids) < len(text)
    assert tok.encode_batch([text, "hello"]) == [ids, tok.encode("hello")]
    assert tok.encode("") == []
    # Qwen2's pre-tokenizer splits digits one by one.
    assert len(tok.encode("12345")) == 5


def test_tokenizer_json_file_and_model_dir(tmp_path: Path) -> None:
    tok = load_tokenizer(str(WORDLEVEL))
    assert tok.info.name == str(WORDLEVEL) and tok.info.vocab_size == 4
    assert tok.encode("hello world zebra") == [2, 3, 0]
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(WORDLEVEL, model_dir / "tokenizer.json")
    from_dir = load_tokenizer(str(model_dir))
    assert from_dir.info.source == str(model_dir / "tokenizer.json")
    assert from_dir.count("w w w") == 3


def test_errors_name_the_spec(tmp_path: Path) -> None:
    with pytest.raises(ServelabError, match="holds no tokenizer.json"):
        load_tokenizer(str(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ServelabError, match="not a valid tokenizer.json"):
        load_tokenizer(str(bad))
    with pytest.raises(ServelabError) as info:
        load_tokenizer("no-such-org/no-such-model")
    msg = str(info.value)
    assert "--tokenizer no-such-org/no-such-model" in msg
    assert "Hugging Face" in msg


def test_id_typecode_is_the_narrowest_that_holds_every_id(tmp_path: Path) -> None:
    """Kept token ids take 2 bytes each while every id is below 65,536, else 4."""
    assert load_tokenizer(None).id_typecode() == "H"  # 32,768 ids
    assert load_tokenizer(str(WORDLEVEL)).id_typecode() == "H"
    cfg = json.loads(WORDLEVEL.read_text())
    for top, typecode in ((65_535, "H"), (65_536, "I")):
        cfg["model"]["vocab"] = {"[UNK]": 0} | {f"w{i}": i for i in range(1, top + 1)}
        path = tmp_path / f"{top}.json"
        path.write_text(json.dumps(cfg))
        assert load_tokenizer(str(path)).id_typecode() == typecode
