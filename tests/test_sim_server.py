"""`servelab sim serve`'s HTTP layer over real sockets: shapes, counts, errors, /metrics.

The server runs in the test's event loop on 127.0.0.1 around the real `SimEngine` with a
round-number cost model (10 ms per step + 1 ms per prefill token + 0.5 ms per decode
sequence), so token counts and usage are known exactly. `time_scale` 20 makes a simulated
second last 50 ms of wall time.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from servelab.client.sse import DONE, SSEParser
from servelab.sim.engine import SimEngine
from servelab.sim.serve.server import ARRIVAL_HEADER

from conftest import SIM_COST, SIM_MODEL, SIM_TOKENIZER, sim_engine_config, sim_serving

DATA = Path(__file__).parent / "data" / "sim_server"
async def read_sse(resp: aiohttp.ClientResponse) -> list[dict[str, object] | bytes]:
    parser = SSEParser()
    out: list[dict[str, object] | bytes] = []
    async for chunk in resp.content.iter_any():
        for payload in parser.feed(chunk):
            out.append(DONE if payload == DONE else json.loads(payload))
    return out


def fixture_chunks(name: str) -> list[dict[str, object]]:
    parser = SSEParser()
    payloads = parser.feed((DATA / name).read_bytes()) + parser.close()
    return [json.loads(p) for p in payloads if p != DONE]


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


PROMPT = "The quick brown fox jumps over the lazy dog."


def test_streamed_completion_has_vllms_chunks_and_exact_usage() -> None:
    async def go() -> list[dict[str, object] | bytes]:
        async with sim_serving() as (_s, session, url):
            body = {"model": SIM_MODEL, "prompt": PROMPT, "max_tokens": 7, "stream": True,
                    "ignore_eos": True, "stream_options": {"include_usage": True}}
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                return await read_sse(resp)

    events = run(go())
    assert events[-1] == DONE
    chunks = events[:-1]
    tokens, final = chunks[:-1], chunks[-1]
    assert len(tokens) == 7  # one chunk per engine output, one token each
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 6 + ["length"]
    assert all(c["choices"][0]["text"] for c in tokens)
    prompt_len = len(SIM_TOKENIZER.encode(PROMPT))
    assert final["choices"] == []
    assert final["usage"] == {"prompt_tokens": prompt_len, "total_tokens": prompt_len + 7,
                              "completion_tokens": 7}
    want = fixture_chunks("vllm-0.32.0-cpu-stream-completions.sse")
    assert set(tokens[0]) == set(want[0])
    assert set(tokens[0]["choices"][0]) == set(want[0]["choices"][0])
    assert set(final) == set(want[-1])
    assert tokens[0]["object"] == "text_completion" and tokens[0]["model"] == SIM_MODEL


def test_streamed_chat_starts_with_the_role_and_counts_usage_per_chunk() -> None:
    async def go() -> list[dict[str, object] | bytes]:
        async with sim_serving() as (_s, session, url):
            body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": PROMPT}],
                    "max_completion_tokens": 5, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                return await read_sse(resp)

    events = run(go())
    chunks = events[:-1]
    want = fixture_chunks("vllm-0.32.0-cpu-stream-chat.sse")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["object"] == want[0]["object"] == "chat.completion.chunk"
    content = chunks[1:-1]
    assert len(content) == 5
    assert [c["usage"]["completion_tokens"] for c in content] == [1, 2, 3, 4, 5]
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert set(content[-1]["choices"][0]) == set(want[-2]["choices"][0])
    assert set(content[0]["choices"][0]) == set(want[1]["choices"][0])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5


def test_non_streaming_completion_and_chat_report_usage() -> None:
    async def go() -> tuple[dict, dict, dict]:
        async with sim_serving() as (_s, session, url):
            ids = list(range(100, 140))
            async with session.post(url + "/v1/completions",
                                    json={"model": SIM_MODEL, "prompt": ids, "max_tokens": 4}) as r:
                comp = await r.json()
                assert ARRIVAL_HEADER in r.headers
            async with session.post(url + "/v1/chat/completions",
                                    json={"model": SIM_MODEL, "max_tokens": 3,
                                          "messages": [{"role": "user", "content": "hi"}]}) as r:
                chat = await r.json()
            async with session.post(url + "/v1/completions",
                                    json={"model": SIM_MODEL, "prompt": "hello"}) as r:
                default = await r.json()
            return comp, chat, default

    comp, chat, default = run(go())
    assert comp["object"] == "text_completion"
    assert comp["usage"]["prompt_tokens"] == 40 and comp["usage"]["completion_tokens"] == 4
    assert comp["choices"][0]["finish_reason"] == "length" and comp["choices"][0]["text"]
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    chatml = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert chat["usage"]["prompt_tokens"] == len(SIM_TOKENIZER.encode(chatml))
    assert chat["usage"]["completion_tokens"] == 3
    assert default["usage"]["completion_tokens"] == 16  # vLLM's completions default


def test_models_tokenize_health_version() -> None:
    async def go() -> tuple[dict, dict, int, dict]:
        async with sim_serving(max_model_len=384) as (_s, session, url):
            async with session.get(url + "/v1/models") as r:
                models = await r.json()
            async with session.post(url + "/tokenize", json={"model": SIM_MODEL, "prompt": PROMPT}) as r:
                tok = await r.json()
            async with session.get(url + "/health") as r:
                health = r.status
            async with session.get(url + "/version") as r:
                version = await r.json()
            return models, tok, health, version

    models, tok, health, version = run(go())
    assert [m["id"] for m in models["data"]] == [SIM_MODEL]
    assert models["data"][0]["max_model_len"] == 384
    assert tok["tokens"] == SIM_TOKENIZER.encode(PROMPT)
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 384
    assert health == 200
    assert "servelab.sim" in version["version"]


def test_errors_have_vllms_shape_and_status() -> None:
    async def go() -> dict[str, tuple[int, dict]]:
        out = {}
        async with sim_serving(max_model_len=64) as (_s, session, url):
            cases = {
                "wrong_model": {"model": "other", "prompt": "x", "max_tokens": 1},
                "too_long": {"model": SIM_MODEL, "prompt": list(range(64)), "max_tokens": 1},
                "max_tokens": {"model": SIM_MODEL, "prompt": list(range(60)), "max_tokens": 5},
                "no_prompt": {"model": SIM_MODEL, "max_tokens": 5},
                "batch": {"model": SIM_MODEL, "prompt": ["a", "b"], "max_tokens": 5},
                "n": {"model": SIM_MODEL, "prompt": "a", "max_tokens": 5, "n": 2},
            }
            for name, body in cases.items():
                async with session.post(url + "/v1/completions", json=body) as r:
                    out[name] = (r.status, await r.json())
            async with session.post(url + "/v1/completions", data=b"{not json",
                                    headers={"Content-Type": "application/json"}) as r:
                out["malformed"] = (r.status, await r.json())
        return out

    out = run(go())
    assert out["wrong_model"][0] == 404
    assert out["wrong_model"][1]["error"]["message"] == "The model `other` does not exist."
    assert out["wrong_model"][1]["error"]["type"] == "NotFoundError"
    for name in ("too_long", "max_tokens", "no_prompt", "malformed", "batch", "n"):
        status, body = out[name]
        assert status == 400, name
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["code"] == 400 and body["error"]["type"] == "BadRequestError"
    assert "maximum model length of 64" in out["too_long"][1]["error"]["message"]
    assert "(5 > 64 - 60)" in out["max_tokens"][1]["error"]["message"]
    assert "not valid JSON" in out["malformed"][1]["error"]["message"]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _with(labels: tuple[tuple[str, str], ...], **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels + tuple(more.items())))


def _families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (type, label names other than le) of the vllm: families."""
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith("vllm:"):
            labels = frozenset(k for s in fam.samples for k in s.labels if k != "le")
            out[fam.name] = (fam.type, labels)
    return out


def test_metrics_have_vllms_names_and_exact_token_totals() -> None:
    prompts = [list(range(10, 10 + n)) for n in (20, 33, 47)]
    outs = [3, 5, 8]

    async def go() -> str:
        async with sim_serving() as (_s, session, url):
            async def one(p: list[int], n: int) -> None:
                body = {"model": SIM_MODEL, "prompt": p, "max_tokens": n, "stream": True}
                async with session.post(url + "/v1/completions", json=body) as r:
                    await read_sse(r)

            await asyncio.gather(*(one(p, n) for p, n in zip(prompts, outs)))
            async with session.get(url + "/metrics") as r:
                return await r.text()

    text = run(go())
    samples = _samples(text)
    lab = (("engine", "0"), ("model_name", SIM_MODEL))
    assert samples[("vllm:prompt_tokens_total", lab)] == 100
    assert samples[("vllm:generation_tokens_total", lab)] == 16
    assert samples[("vllm:num_requests_running", lab)] == 0
    assert samples[("vllm:num_requests_waiting", lab)] == 0
    assert samples[("vllm:time_to_first_token_seconds_count", lab)] == 3
    assert samples[("vllm:inter_token_latency_seconds_count", lab)] == 16 - 3
    assert samples[("vllm:e2e_request_latency_seconds_count", lab)] == 3
    assert samples[("vllm:request_success_total", _with(lab, finished_reason="length"))] == 3
    # The prompts share their first block (ids 10..25): whichever is scheduled first, the
    # others find it cached (vLLM registers a block's hash when it is allocated).
    assert samples[("vllm:prefix_cache_queries_total", lab)] == 100
    assert samples[("vllm:prefix_cache_hits_total", lab)] > 0

    got = _families(text)
    want = _families((DATA / "vllm-0.32.0-cpu-metrics.prom").read_text())
    for name, (kind, labels) in got.items():
        assert name in want, name
        assert kind == want[name][0], name
        if name == "vllm:cache_config_info":
            assert labels <= want[name][1]
            assert {"block_size", "kv_cache_size_tokens", "gpu_memory_utilization",
                    "enable_prefix_caching", "engine"} <= labels
        else:
            assert labels == want[name][1], name
    required = {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                "vllm:num_preemptions", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
                "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:time_to_first_token_seconds",
                "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
                "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                "vllm:request_decode_time_seconds", "vllm:cache_config_info"}
    assert required <= set(got)
    info = [k for k in samples if k[0] == "vllm:cache_config_info"]
    assert dict(info[0][1])["kv_cache_size_tokens"] == str(256 * 16)


def test_client_disconnect_aborts_the_request_in_the_engine() -> None:
    async def go() -> dict:
        async with sim_serving(time_scale=1.0) as (server, session, url):
            body = {"model": SIM_MODEL, "prompt": PROMPT, "max_tokens": 400, "stream": True}
            resp = await session.post(url + "/v1/completions", json=body)
            await resp.content.readline()  # the first token arrived: it runs
            assert server.driver.num_in_flight == 1
            resp.close()
            for _ in range(500):  # the server notices the closed socket
                if server.driver.num_in_flight == 0:
                    break
                await asyncio.sleep(0.01)
            async with session.get(url + "/metrics") as r:
                return _samples(await r.text())

    samples = run(go())
    lab = (("engine", "0"), ("model_name", SIM_MODEL))
    assert samples[("vllm:num_requests_running", lab)] == 0
    assert samples[("vllm:request_success_total", _with(lab, finished_reason="abort"))] == 1
    assert samples[("vllm:generation_tokens_total", lab)] < 400


def test_stop_ends_open_streams_with_abort() -> None:
    async def go() -> list[dict[str, object] | bytes]:
        async with sim_serving(time_scale=1.0) as (server, session, url):
            body = {"model": SIM_MODEL, "prompt": PROMPT, "max_tokens": 400, "stream": True,
                    "stream_options": {"include_usage": True}}
            async with session.post(url + "/v1/completions", json=body) as resp:
                first = await resp.content.readline()
                await server.stop()
                rest = await read_sse(resp)
                return [json.loads(first[6:])] + rest

    events = run(go())
    assert events[-1] == DONE
    assert events[-3]["choices"][0]["finish_reason"] == "abort"
    assert events[-2]["usage"]["completion_tokens"] == len(events) - 3


def test_prefix_cache_reset_is_refused_while_blocks_are_held_and_empties_the_cache() -> None:
    from servelab.engine.running import reset_prefix_cache

    engine = SimEngine(sim_engine_config(), SIM_COST)

    async def go() -> tuple[int, int, int, str | None, str | None, str | None]:
        async with sim_serving(engine=engine) as (_server, session, url):
            body = {"model": SIM_MODEL, "prompt": " ".join([PROMPT] * 8), "max_tokens": 4}
            async with session.post(url + "/v1/completions", json=body) as r:
                prompt_tokens = (await r.json())["usage"]["prompt_tokens"]
            async with session.post(url + "/v1/completions", json=body) as r:
                await r.read()
            hits_before = engine.stats.prefix_cache_hits_total
            # A request streaming holds its blocks: the reset is refused (deadline 0: no retry).
            long = {"model": SIM_MODEL, "prompt": "another prompt", "max_tokens": 300, "stream": True}
            resp = await session.post(url + "/v1/completions", json=long)
            await resp.content.readline()
            refused = await asyncio.to_thread(reset_prefix_cache, [url], "/reset_prefix_cache", 0.0)
            await resp.read()
            done = await asyncio.to_thread(reset_prefix_cache, [url], "/reset_prefix_cache", 0.0)
            missing = await asyncio.to_thread(reset_prefix_cache, [url], "/no_such_reset", 0.0)
            async with session.post(url + "/v1/completions", json=body) as r:
                await r.read()
            return prompt_tokens, hits_before, engine.stats.prefix_cache_hits_total, refused, done, missing

    prompt_tokens, hits_before, hits_after, refused, done, missing = run(go())
    # The second identical prompt hit every full block but the one holding its last token.
    assert hits_before == (prompt_tokens - 1) // 16 * 16 > 0
    assert refused is not None and "still refused" in refused
    assert done is None
    assert missing is not None and "HTTP 404" in missing
    # After the reset the same prompt finds nothing cached.
    assert hits_after == hits_before
