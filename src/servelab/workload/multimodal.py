"""`random-mm`: random-token prompts plus synthetic images, as vLLM's RandomMultiModalDataset.

Per request the number of images is uniform in [floor(n(1-r)), ceil(n(1+r))]
(n = `--random-mm-base-items-per-request`, r = `--random-mm-num-mm-items-range-ratio`),
capped by the sum of `--random-mm-limit-mm-per-prompt`; each image's (height, width) is
drawn from `--random-mm-bucket-config` (a dict {(H, W, T): probability}, renormalised, zero
entries dropped; T = 1 is an image). Video buckets (T > 1) with a non-zero probability are
refused: servelab would need a video encoder to make them.

An image is uniform random RGB noise (the worst case for a codec, as in vLLM), encoded as
an uncompressed PNG (numpy + zlib, no imaging library) and sent as a base64 data URL in
the user turn after the text, so only chat backends can send it. vLLM encodes its noise as
JPEG: servelab's images are larger on the wire (about H x W x 3 bytes before base64) and
decode to the same pixel count, which is what the server's vision tokens depend on.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import struct
import zlib
from typing import TYPE_CHECKING, Protocol

import numpy as np

from servelab.workload.synthetic import RandomShape, random_requests, request_spec

if TYPE_CHECKING:
    from servelab.workload.request import RequestSpec
    from servelab.workload.tokenizer import TokenizerHandle


class ImageOptions(Protocol):
    """The random-mm flags this module reads (the dataset options carry them): images per
    request and their spread, the per-modality limit, the (height, width, frames, weight)
    buckets."""

    random_mm_base_items_per_request: int
    random_mm_num_mm_items_range_ratio: float
    random_mm_limit_mm_per_prompt: dict[str, int]
    random_mm_bucket_config: tuple[tuple[int, int, int, float], ...]

Bucket = tuple[int, int, int, float]  # (height, width, frames, probability)
DEFAULT_BUCKETS: tuple[Bucket, ...] = ((256, 256, 1, 0.5), (720, 1280, 1, 0.5), (720, 1280, 16, 0.0))
DEFAULT_LIMITS: dict[str, int] = {"image": 255, "video": 1}


def parse_buckets(value: object) -> tuple[Bucket, ...]:
    """vLLM's --random-mm-bucket-config: a Python literal dict {(H, W, T): p} (or, from a
    spec file, that dict with string keys, or a list of [H, W, T, p])."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError("expected a dict like {(256, 256, 1): 0.5, (720, 1280, 1): 0.5}") from None
    if isinstance(value, dict):
        items = []
        for key, p in value.items():
            if isinstance(key, str):
                try:
                    key = ast.literal_eval(key)
                except (ValueError, SyntaxError):
                    pass
            if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(x, int) for x in key)):
                raise ValueError(f"bucket key {key!r} is not a tuple (H, W, T) of integers")
            items.append((*key, p))
        value = items
    if not isinstance(value, (list, tuple)):
        raise ValueError("expected a dict {(H, W, T): probability}")
    out = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 4):
            raise ValueError(f"bucket {item!r} is not (H, W, T, probability)")
        h, w, t, p = item
        if not all(isinstance(x, int) and x >= 1 for x in (h, w, t)):
            raise ValueError(f"bucket {(h, w, t)}: H, W and T must be integers >= 1")
        if not isinstance(p, (int, float)) or p < 0 or not math.isfinite(p):
            raise ValueError(f"bucket {(h, w, t)}: probability must be a number >= 0")
        out.append((h, w, t, float(p)))
    return tuple(out)


def parse_limits(value: object) -> dict[str, int]:
    """vLLM's --random-mm-limit-mm-per-prompt: JSON like {"image": 3, "video": 0}."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError('expected JSON like {"image": 3, "video": 0}') from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in value.items()
    ):
        raise ValueError('expected JSON like {"image": 3, "video": 0} (counts >= 0)')
    return dict(value)


def check_buckets(buckets: tuple[Bucket, ...], limits: dict[str, int]) -> tuple[Bucket, ...]:
    """The image buckets with non-zero probability, renormalised; ValueError naming why not."""
    live = [b for b in buckets if b[3] > 0]
    video = [b[:3] for b in live if b[2] > 1]
    if video:
        raise ValueError(f"--random-mm-bucket-config: video buckets {video} are not supported: "
                         "servelab sends images only (set their probability to 0)")
    if not live:
        raise ValueError("--random-mm-bucket-config: no bucket has a probability > 0")
    if "image" not in limits:
        raise ValueError("--random-mm-limit-mm-per-prompt has no 'image' limit")
    total = sum(b[3] for b in live)
    return tuple((h, w, t, p / total) for h, w, t, p in live)


def item_count_range(opts: ImageOptions, limits: dict[str, int]) -> tuple[int, int]:
    """vLLM's [floor(n(1-r)), ceil(n(1+r))], the top capped by the image limit."""
    n, r = opts.random_mm_base_items_per_request, opts.random_mm_num_mm_items_range_ratio
    lo = max(0, math.floor(n * (1 - r)))
    hi = min(limits["image"], math.ceil(n * (1 + r)))
    if lo > hi:
        raise ValueError(f"--random-mm-base-items-per-request {n}: at least {lo} images per "
                         f"request asked for, but --random-mm-limit-mm-per-prompt allows {hi}")
    return lo, hi


def png_data_url(pixels: np.ndarray) -> str:
    """An RGB uint8 array (H, W, 3) as a `data:image/png;base64,...` URL (stored, unfiltered)."""
    h, w, _ = pixels.shape
    raw = np.zeros((h, 1 + w * 3), dtype=np.uint8)  # each scanline: filter byte 0, then RGB
    raw[:, 1:] = pixels.reshape(h, w * 3)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    # Level 0: random pixels do not compress, and storing is ~50x faster than deflating.
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
           + chunk(b"IDAT", zlib.compress(raw.tobytes(), 0)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def random_mm_requests(
    opts: ImageOptions, text: RandomShape, tok: TokenizerHandle, rng: np.random.Generator
) -> tuple[list[RequestSpec], list[str]]:
    """The random dataset's prompts (`text`: the same flags) with images attached; and a note."""
    limits = opts.random_mm_limit_mm_per_prompt
    buckets = check_buckets(opts.random_mm_bucket_config, limits)
    lo, hi = item_count_range(opts, limits)
    texts = random_requests(text, tok, rng)
    probs = np.array([b[3] for b in buckets])
    out = []
    images_total = 0
    for spec in texts:
        k = int(rng.integers(lo, hi + 1))
        picks = rng.choice(len(buckets), size=k, p=probs) if k else np.zeros(0, dtype=int)
        images = tuple(
            png_data_url(rng.integers(0, 256, (buckets[j][0], buckets[j][1], 3), dtype=np.uint8))
            for j in picks.tolist()
        )
        images_total += k
        out.append(request_spec(spec.index, spec.text, spec.prompt_len, spec.output_len, True, images))
    sizes = ", ".join(f"{h}x{w} p={p:.2f}" for h, w, _, p in buckets)
    mib = sum(len(u) for r in out for u in r.images) / 2**20
    note = (f"random-mm: {images_total:,} images ({lo}-{hi} per request; {sizes}; "
            f"{mib:,.1f} MiB of data URLs, all held in memory for the run); prompt_len counts "
            "the text only, the server adds the images' vision tokens")
    return out, [note]
