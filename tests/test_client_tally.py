"""Token accounting: tokens (not chunks) counted, ITLs assigned so their sum is E2E - TTFT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.client.sse import SSEParser
from servelab.client.tally import StreamTally

DATA = Path(__file__).parent / "data" / "client"


def _tally(payloads: list[bytes], times: list[float]) -> StreamTally:
    t = StreamTally()
    for p, ts in zip(payloads, times):
        t.add(p, ts)
    return t


def _fixture(name: str) -> list[bytes]:
    return SSEParser().feed((DATA / name).read_bytes())


def test_vllm_completions_stream_counts_usage_tokens() -> None:
    payloads = _fixture("vllm-0.32.0-cpu-stream-completions.sse")
    # 8 token chunks (the last with "" text), a usage chunk, [DONE]; one second apart.
    tally = _tally(payloads, [float(i) for i in range(len(payloads))])
    assert tally.done and tally.error is None
    n, ttft_ms, itl, e2el_ms = tally.timeline(send_t=-0.5)
    assert n == 8
    assert ttft_ms == 500.0
    assert itl == [1000.0] * 7
    assert e2el_ms == 7500.0


def test_vllm_chat_stream_skips_the_role_chunk() -> None:
    payloads = _fixture("vllm-0.32.0-cpu-stream-chat.sse")
    tally = _tally(payloads, [float(i) for i in range(len(payloads))])
    n, ttft_ms, itl, e2el_ms = tally.timeline(send_t=0.0)
    assert n == 6
    assert ttft_ms == 1000.0  # the role-only chunk at t=0 carries no token
    assert len(itl) == 5 and sum(itl) == e2el_ms - ttft_ms


def _chunk(text: str, cum: int | None, role: bool = False, key: str = "content") -> bytes:
    delta: dict[str, str] = {"role": "assistant", key: text} if role else {key: text}
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta}]}
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": cum, "total_tokens": 3 + cum}
    return json.dumps(obj).encode()


def test_continuous_usage_gives_tokens_per_chunk_and_even_itl_split() -> None:
    payloads = [_chunk("", 0, role=True), _chunk("a b c", 3), _chunk("d", 4), _chunk("e f", 6),
                b'{"choices":[],"usage":{"completion_tokens":6}}', b"[DONE]"]
    tally = _tally(payloads, [0.0, 0.1, 0.2, 0.4, 0.4, 0.4])
    assert tally.tokens_per_chunk() == [3, 1, 2]
    n, ttft_ms, itl, e2el_ms = tally.timeline(send_t=0.0)
    assert n == 6
    assert ttft_ms == pytest.approx(100.0)
    # first chunk: 2 extra tokens arrived with the first (0 ms); then 100 ms / 1; 200 ms / 2.
    assert itl == pytest.approx([0.0, 0.0, 100.0, 100.0, 100.0])
    assert sum(itl) == pytest.approx(e2el_ms - ttft_ms)


def test_final_usage_only_spreads_tokens_evenly_over_chunks() -> None:
    payloads = [_chunk("ab", None), _chunk("cd", None), _chunk("e", None),
                b'{"choices": [], "usage": {"completion_tokens": 5}}', b"[DONE]"]
    tally = _tally(payloads, [1.0, 2.0, 3.0, 3.0, 3.0])
    assert tally.tokens_per_chunk() == [2, 2, 1]
    n, ttft_ms, itl, e2el_ms = tally.timeline(send_t=0.0)
    assert (n, len(itl)) == (5, 4)
    assert sum(itl) == pytest.approx(e2el_ms - ttft_ms)


def test_no_usage_counts_carrying_chunks() -> None:
    payloads = [_chunk("x", None), _chunk("", None), _chunk("y", None), b"[DONE]"]
    n, ttft_ms, itl, _ = _tally(payloads, [1.0, 2.0, 3.0, 3.0]).timeline(send_t=0.0)
    assert n == 3 and ttft_ms == 1000.0 and itl == [1000.0, 1000.0]


def test_reasoning_deltas_count_toward_ttft() -> None:
    payloads = [_chunk("", None, role=True), _chunk("think", None, key="reasoning_content"),
                _chunk("hm", None, key="reasoning"), _chunk("answer", None), b"[DONE]"]
    n, ttft_ms, _, _ = _tally(payloads, [0.5, 1.0, 2.0, 3.0, 3.0]).timeline(send_t=0.0)
    assert n == 3 and ttft_ms == 1000.0


def test_role_chunk_with_content_carries_a_token() -> None:
    payloads = [_chunk("hi", None, role=True), _chunk("there", None), b"[DONE]"]
    n, ttft_ms, _, _ = _tally(payloads, [1.0, 2.0, 2.0]).timeline(send_t=0.0)
    assert n == 2 and ttft_ms == 1000.0


def test_error_object_in_stream_is_an_error_and_quoted_text_is_not() -> None:
    t = StreamTally()
    t.add(_chunk('the "error": word and "completion_tokens": 99', None), 1.0)
    assert t.error is None and t.usage_tokens is None and len(t.times) == 1
    t.add(b'{"object":"error","message":"boom","code":500}', 2.0)
    assert t.error == "boom"
