"""random-mm: images per request, real PNGs of the bucket sizes, chat bodies, and refusals."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from servelab.client.backends import get_backend
from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.multimodal import png_data_url
from servelab.workload.tokenizer import load_tokenizer

TOK = load_tokenizer(None)


def _decode_png(url: str) -> np.ndarray:
    """Pixels of a stored RGB PNG, every chunk's CRC checked (no imaging library)."""
    data = base64.b64decode(url.removeprefix("data:image/png;base64,"))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = body
        pos += 12 + n
    w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color) == (8, 2)
    raw = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), dtype=np.uint8).reshape(h, 1 + 3 * w)
    assert not raw[:, 0].any()  # filter type 0 on every scanline
    return raw[:, 1:].reshape(h, w, 3)


def test_png_round_trips_the_pixels() -> None:
    pixels = np.random.default_rng(1).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    assert np.array_equal(_decode_png(png_data_url(pixels)), pixels)


def _mm(**kw) -> object:
    opts = DatasetOptions(dataset_name="random-mm", **{"num_prompts": 30, "random_input_len": 16,
                                                         "random_output_len": 4, **kw})
    return build_workload(opts, TOK, 2)


def test_images_per_request_and_their_sizes() -> None:
    wl = _mm(random_mm_base_items_per_request=2, random_mm_num_mm_items_range_ratio=0.5,
             random_mm_bucket_config="{(8, 4, 1): 0.25, (6, 10, 1): 0.75, (720, 1280, 16): 0.0}")
    counts = [len(r.images) for r in wl.requests]
    assert set(counts) <= {1, 2, 3} and len(set(counts)) > 1  # [floor(2 x 0.5), ceil(2 x 1.5)]
    shapes = [_decode_png(u).shape for r in wl.requests for u in r.images]
    assert set(shapes) == {(8, 4, 3), (6, 10, 3)}
    assert all(r.prompt_len == 16 and r.messages is not None for r in wl.requests)
    # [floor(3 x 0.5), ceil(3 x 1.5)] = [1, 5], the top capped by the image limit 2 (vLLM).
    capped = _mm(random_mm_base_items_per_request=3, random_mm_limit_mm_per_prompt='{"image": 2}',
                 random_mm_num_mm_items_range_ratio=0.5, random_mm_bucket_config="{(4, 4, 1): 1}")
    assert {len(r.images) for r in capped.requests} == {1, 2}


def test_chat_body_carries_text_then_images_and_completions_refuse() -> None:
    [req] = _mm(num_prompts=1, random_mm_bucket_config="{(4, 4, 1): 1}").requests
    body = json.loads(get_backend("openai-chat").body(req, "M", False))
    content = body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": req.text}
    assert [c["type"] for c in content[1:]] == ["image_url"]
    assert content[1]["image_url"]["url"] == req.images[0]
    with pytest.raises(ServelabError, match="only a chat backend can send"):
        get_backend("vllm").body(req, "M", False)


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"random_mm_bucket_config": "{(720, 1280, 16): 1.0}"}, "video buckets [(720, 1280, 16)] are not supported"),
        ({"random_mm_bucket_config": "{(4, 4): 1.0}"}, "is not a tuple (H, W, T)"),
        ({"random_mm_bucket_config": "{(4, 4, 1): 0}"}, "no bucket has a probability > 0"),
        ({"random_mm_limit_mm_per_prompt": "image=3"}, "expected JSON like"),
        ({"random_mm_num_mm_items_range_ratio": 1.5}, "random_mm_num_mm_items_range_ratio"),
        ({"random_mm_base_items_per_request": 4, "random_mm_limit_mm_per_prompt": '{"image": 2}',
          "random_mm_num_mm_items_range_ratio": 0.0}, "at least 4 images per request"),
    ],
)
def test_bad_random_mm_options(kw: dict, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        DatasetOptions(dataset_name="random-mm", **kw)
    assert needle in str(info.value)


def test_bench_sends_images_to_a_chat_server_and_refuses_completions(servelab_cli, token_server,
                                                                     tmp_path: Path) -> None:
    srv = token_server()
    args = ["--base-url", srv.url, "--model", "M", "--dataset-name", "random-mm", "--num-prompts", "4",
            "--random-input-len", "16", "--random-output-len", "3", "--no-progress",
            "--random-mm-bucket-config", "{(32, 32, 1): 1.0}"]
    ok = servelab_cli("bench", "--backend", "openai-chat", *args, "--save-result",
                      "--result-dir", str(tmp_path), "--result-filename", "r.json")
    assert ok.returncode == 0, ok.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["completed"], r["total_input_tokens"], r["total_output_tokens"]) == (4, 64, 12)
    bad = servelab_cli("bench", "--backend", "vllm", *args)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "only a chat backend can send (use --backend openai-chat)" in " ".join(bad.stderr.split())
