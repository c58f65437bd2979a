"""Multi-turn sessions: reading them, and sending each turn with the history and the answers
the server actually returned (a real token server over 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from servelab.client.backends import get_backend
from servelab.client.sessions import send_sessions
from servelab.client.target import TargetConfig
from servelab.errors import ServelabError
from servelab.workload.arrivals import ArrivalOptions, schedule_s
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
SESSIONS = DATA / "sessions_sample.jsonl"
WORDS_FILE = DATA / "wordlevel_tokenizer.json"
WORDS = load_tokenizer(str(WORDS_FILE))
# The token server answers token i as " t{i}"; with eos_after=3 every answer stops at 3
# tokens although 8 are asked for, so the history can only hold what the server sent.
ANSWER = " t0 t1 t2"


def _sessions(path: Path = SESSIONS, **kw) -> object:
    opts = DatasetOptions(dataset_name="sessions", dataset_path=path, **kw)
    return build_workload(opts, WORDS, 0)


def test_sessions_file_becomes_turns_and_sessions() -> None:
    wl = _sessions(think_time_s=0.5)
    assert [(s.session_id, [t.index for t in s.turns]) for s in wl.sessions] == [
        ("alice", [0, 1]), ("bob", [2, 3])]
    assert [t.think_time_s for s in wl.sessions for t in s.turns] == [0.0, 0.05, 0.0, 0.5]
    assert [(r.messages[0].content, r.prompt_len, r.output_len) for r in wl.requests] == [
        ("w w w", 3, 8), ("hello world", 2, 8), ("w", 1, 8), ("w w", 2, 8)]
    # With answers of the asked-for 8 tokens: 3 + (3 + 8 + 2) + 1 + (1 + 8 + 2) = 28 tokens.
    assert any("2 sessions, 4 turns" in n and "about 28 prompt tokens" in n for n in wl.notes)


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"session_id": "a", "turns": []}', "s.jsonl:1: turns: List should have at least 1 item"),
        ('{"session_id": "a", "turns": [{"prompt": "w"}]}', "s.jsonl:1: turns.0.output_len: Field required"),
        ('{"session_id": "a", "turns": [{"prompt": "w", "output_len": 0}]}', "turns.0.output_len: Input should be greater"),
        ('{"session_id": "a", "turns": [{"prompt": "w", "output_len": 2, "think": 1}]}', "turns.0.think: Extra inputs"),
        ('{"id": "a", "turns": [{"prompt": "w", "output_len": 2}]}', "s.jsonl:1: session_id: Field required"),
    ],
)
def test_bad_session_lines_name_file_line_and_key(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(ServelabError) as info:
        _sessions(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_sharegpt_multi_turn_keeps_whole_conversations(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([
        {"id": "c1", "conversations": [
            {"from": "gpt", "value": "w"},  # opens with an answer: skipped
            {"from": "human", "value": "w w"}, {"from": "gpt", "value": "w w w w"},
            {"from": "human", "value": "hello"}, {"from": "gpt", "value": "w w w w w"}]},
        {"id": "c2", "conversations": [{"from": "gpt", "value": "w"}]},  # no human turn
    ]), encoding="utf-8")
    opts = DatasetOptions(dataset_name="sharegpt", dataset_path=path, multi_turn=True,
                          think_time_s=1.5, num_prompts=5)
    wl = build_workload(opts, WORDS, 0)
    [session] = wl.sessions
    assert session.session_id == "c1" and [t.think_time_s for t in session.turns] == [0.0, 1.5]
    assert [(r.messages[0].content, r.prompt_len, r.output_len) for r in wl.requests] == [
        ("w w", 2, 4), ("hello", 1, 5)]
    assert any("holds 1 conversations" in n for n in wl.notes)


def _target(url: str) -> TargetConfig:
    return TargetConfig(base_url=url, endpoint="/v1/chat/completions",
                        backend=get_backend("openai-chat"), model="M")


def _send(wl, url: str, max_concurrency: int | None):
    intended = schedule_s(wl, ArrivalOptions(), np.random.default_rng(0), sessions=True)
    sent: list = []
    records = asyncio.run(send_sessions(_target(url), wl.requests, wl.sessions, intended,
                                        max_concurrency, sent=sent))
    return {r.index: r for r in records}, {s.index: s for s in sent}


def test_second_turn_carries_the_first_answer_the_server_returned(token_server) -> None:
    srv = token_server(eos_after=3)
    wl = _sessions()
    recs, sent = _send(wl, srv.url, max_concurrency=1)
    assert recs[0].generated_text == ANSWER and recs[0].output_len == 3
    assert [(m.role, m.content) for m in sent[1].messages] == [
        ("user", "w w w"), ("assistant", ANSWER), ("user", "hello world")]
    assert [(m.role, m.content) for m in sent[3].messages] == [
        ("user", "w"), ("assistant", ANSWER), ("user", "w w")]
    # History tokens: the user messages' counts plus the answers' server-counted lengths.
    assert [recs[i].prompt_len for i in range(4)] == [3, 3 + 3 + 2, 1, 1 + 3 + 2]
    # Turn 1 falls due after turn 0's answer plus alice's 0.05 s think time.
    assert recs[1].intended_send_s >= recs[0].send_s + recs[0].e2el_ms / 1000 + 0.05
    # --max-concurrency 1 caps sessions: bob starts only after alice's last answer.
    assert recs[2].send_s >= recs[1].send_s + recs[1].e2el_ms / 1000
    assert srv.stats()["max_in_flight"] == 1


def test_a_failed_turn_ends_its_session(token_server, tmp_path: Path) -> None:
    srv = token_server(fail_every=2)
    path = tmp_path / "s.jsonl"
    turns = [{"prompt": "w", "output_len": 2}] * 3
    path.write_text(json.dumps({"session_id": "s", "turns": turns}) + "\n", encoding="utf-8")
    recs, sent = _send(_sessions(path), srv.url, max_concurrency=None)
    assert [recs[i].error_kind for i in range(3)] == [None, "http_500", "session_broken"]
    assert "turn 1 of session s failed (http_500)" in recs[2].error
    assert sorted(sent) == [0, 1]  # turn 2 was never sent


def test_bench_multi_turn_records_every_turn(servelab_cli, token_server, tmp_path: Path) -> None:
    srv = token_server(eos_after=3)
    proc = servelab_cli(
        "bench", "--base-url", srv.url, "--model", "M", "--backend", "openai-chat",
        "--dataset-name", "sessions", "--dataset-path", str(SESSIONS), "--tokenizer", str(WORDS_FILE),
        "--max-concurrency", "2", "--num-warmups", "1", "--no-progress", "--save-result", "--save-detailed",
        "--result-dir", str(tmp_path), "--result-filename", "r.json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["completed"], r["failed"], r["num_prompts"]) == (4, 0, 4)
    assert r["input_lens"] == [3, 8, 1, 6] and r["output_lens"] == [3, 3, 3, 3]
    assert r["servelab"]["session_ids"] == ["alice", "alice", "bob", "bob"]
    assert r["servelab"]["session_turns"] == [0, 1, 0, 1]
    assert r["generated_texts"] == [ANSWER] * 4


def test_sim_run_and_several_client_processes_refuse_sessions(servelab_cli, token_server) -> None:
    sim = servelab_cli("sim", "run", "--gpu", "L40S", "--model", "Qwen/Qwen3-14B",
                       "--dataset-name", "sessions", "--dataset-path", str(SESSIONS))
    assert sim.returncode == 2 and "Traceback" not in sim.stderr
    assert "sent only by servelab bench" in " ".join(sim.stderr.split())
    srv = token_server()
    multi = servelab_cli("bench", "--base-url", srv.url, "--model", "M", "--backend", "openai-chat",
                         "--dataset-name", "sessions", "--dataset-path", str(SESSIONS),
                         "--num-client-processes", "2", "--no-progress")
    assert multi.returncode == 2 and "Traceback" not in multi.stderr
    assert "sent by one client process" in " ".join(multi.stderr.split())


def test_data_inspect_shows_sessions_and_saves_turns(servelab_cli, tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    proc = servelab_cli("data", "inspect", "--dataset-name", "sessions", "--dataset-path",
                        str(SESSIONS), "--tokenizer", str(WORDS_FILE), "--json",
                        "--save-samples", str(samples))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["requests"], out["sessions"], out["prompt_len"]["total"]) == (4, 2, 8)
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [(r["session_id"], r["turn"], r["messages"][0]["content"]) for r in rows] == [
        ("alice", 0, "w w w"), ("alice", 1, "hello world"), ("bob", 0, "w"), ("bob", 1, "w w")]
