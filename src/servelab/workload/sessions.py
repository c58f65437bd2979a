"""Multi-turn conversations: sessions whose turns are sent one after another, with history.

A session is a list of user turns. At run time (`servelab.client.sessions`) turn k is sent
after turn k-1's answer has arrived plus the turn's think time, carrying the whole history
as chat messages: every earlier user message and the answer the server actually returned
to it. So the prefix a server can reuse from one turn to the next is the one production chat
produces. Two sources:

* `--dataset-name sharegpt --multi-turn`: whole ShareGPT conversations. Each human turn
  directly followed by an answer (gpt, chatgpt, assistant, bard, bing) is a user turn whose
  output length is that answer's token count (or `--sharegpt-output-len`); turns before the
  first human turn are skipped, and a conversation ends at its first empty turn.
  Conversations are shuffled with the seed (unless `--disable-shuffle`) as vLLM's sharegpt
  shuffles; `--num-prompts` counts sessions. Every turn waits `--think-time-s`.
* `--dataset-name sessions --dataset-path FILE.jsonl`: one session per line,
  `{"session_id": ..., "turns": [{"prompt": ..., "output_len": ..., "think_time_s": ...}]}`
  (`think_time_s` optional, default `--think-time-s`; the first turn's is not used: a
  session starts on the arrival schedule). Lines are used in file order.

In the workload, each turn is one `RequestSpec` holding only its own user message
(`prompt_len` counts that message); the history is added when it is sent. Sessions are
never oversampled: a repeated conversation would look like one user to a prefix cache.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError
from servelab.workload.filelines import json_lines, require_file
from servelab.workload.json_array import JsonArrayReader
from servelab.workload.request import ChatMessage, RequestSpec

if TYPE_CHECKING:
    from servelab.workload.tokenizer import TokenizerHandle

_HUMAN = frozenset({"human", "user"})
_ANSWER = frozenset({"gpt", "chatgpt", "assistant", "bard", "bing"})


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """One turn: its request's index in `Workload.requests` and the pause (s) between the
    previous turn's answer and this turn's send (0 for a session's first turn)."""

    index: int
    think_time_s: float


@dataclass(frozen=True, slots=True)
class Session:
    """A conversation: its id and its turns in order."""

    session_id: str
    turns: tuple[SessionTurn, ...]


@dataclass(frozen=True, slots=True)
class SessionSet:
    """What a multi-turn dataset builds: the turns as requests, the sessions, notes."""

    requests: list[RequestSpec]
    sessions: tuple[Session, ...]
    notes: list[str]


class _TurnLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str
    output_len: int = Field(ge=1)
    think_time_s: float | None = Field(None, ge=0)


class _SessionLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str | int
    turns: list[_TurnLine] = Field(min_length=1)


def _assemble(raw: list[tuple[str, list[tuple[str, int, float]]]], tok: TokenizerHandle,
              source: str) -> SessionSet:
    """Sessions from (id, [(user text, output_len, think_time_s)]) in order."""
    texts = [text for _, turns in raw for text, _, _ in turns]
    counts = iter([len(ids) for ids in tok.encode_batch(texts)])
    requests: list[RequestSpec] = []
    sessions = []
    for session_id, turns in raw:
        planned = []
        for k, (text, out_len, think) in enumerate(turns):
            idx = len(requests)
            requests.append(RequestSpec(idx, None, (ChatMessage("user", text),), next(counts), out_len))
            planned.append(SessionTurn(idx, think if k else 0.0))
        sessions.append(Session(session_id, tuple(planned)))
    return SessionSet(requests, tuple(sessions), [history_note(requests, sessions, source)])


def history_note(requests: list[RequestSpec], sessions: list[Session], source: str) -> str:
    """What a reader of the lengths must know: they are per turn, history comes on top."""
    longest = 0
    total = 0
    for s in sessions:
        carried = 0  # tokens of the history before this turn, if answers run to output_len
        for t in s.turns:
            r = requests[t.index]
            total += carried + r.prompt_len
            longest = max(longest, carried + r.prompt_len)
            carried += r.prompt_len + r.output_len
    return (
        f"{source}: {len(sessions):,} sessions, {len(requests):,} turns; prompt_len counts each "
        "turn's own message, and each turn is sent with the history so far (answers as the "
        f"server returns them): with answers of the requested lengths about {total:,} prompt "
        f"tokens in all, the longest {longest:,}"
    )


def read_sessions(path: Path, tok: TokenizerHandle, *, num_prompts: int,
                  think_time_s: float) -> SessionSet:
    """The first `num_prompts` sessions of a sessions JSONL file (one session per line)."""
    require_file(path, "sessions")
    raw: list[tuple[str, list[tuple[str, int, float]]]] = []
    seen: dict[str, int] = {}
    for lineno, obj in json_lines(path):
        if len(raw) == num_prompts:
            break
        try:
            line = _SessionLine.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "line"
            raise ServelabError(f"{path}:{lineno}: {where}: {err['msg']}") from None
        sid = str(line.session_id)
        if sid in seen:
            raise ServelabError(f"{path}:{lineno}: session_id {sid!r} already used on line {seen[sid]}")
        seen[sid] = lineno
        raw.append((sid, [(t.prompt, t.output_len,
                           think_time_s if t.think_time_s is None else t.think_time_s)
                          for t in line.turns]))
    if not raw:
        raise ServelabError(f"{path}: no sessions (the file has no non-blank lines)")
    out = _assemble(raw, tok, str(path))
    if len(raw) < num_prompts:
        out.notes.append(f"--num-prompts {num_prompts}: {path} holds {len(raw):,} sessions; "
                         "all are sent (sessions are not oversampled)")
    return out


def _conversation_turns(record: object, path: Path, offset: int, line: int) -> list[tuple[str, str]]:
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        raise ServelabError(f"{path}: byte {offset} (line {line}): a ShareGPT record must be "
                            "an object with a 'conversations' list")
    turns = record["conversations"]
    pairs = []
    i = 0
    while i + 1 < len(turns):
        a, b = turns[i], turns[i + 1]
        if not (isinstance(a, dict) and isinstance(b, dict)
                and isinstance(a.get("value"), str) and isinstance(b.get("value"), str)):
            raise ServelabError(f"{path}: byte {offset} (line {line}): conversation turn {i} "
                                "or the next lacks a string 'value'")
        if a.get("from") in _HUMAN and b.get("from") in _ANSWER:
            if not a["value"].strip() or not b["value"].strip():
                break  # an empty turn: the rest of the conversation no longer follows it
            pairs.append((a["value"], b["value"]))
            i += 2
        elif pairs:
            break  # the alternation broke: later turns answer something we did not send
        else:
            i += 1
    return pairs


def sharegpt_sessions(path: Path, tok: TokenizerHandle, *, num_prompts: int,
                      output_len: int | None, think_time_s: float, seed: int,
                      disable_shuffle: bool) -> SessionSet:
    """`num_prompts` whole ShareGPT conversations as sessions (see the module docstring)."""
    if not path.exists():
        raise ServelabError(f"--dataset-path {path}: no such file")
    convs = []
    for item in JsonArrayReader(path):
        pairs = _conversation_turns(item.value, path, item.byte_offset, item.line)
        if pairs:
            record = item.value
            convs.append((str(record.get("id", item.byte_offset)), pairs))
    if not disable_shuffle:
        random.Random(seed).shuffle(convs)  # vLLM's sharegpt order for the same seed
    chosen = convs[:num_prompts]
    if not chosen:
        raise ServelabError(f"{path}: no conversation with a human turn and its answer")
    if output_len is None:
        counts = [len(ids) for ids in tok.encode_batch(
            [answer for _, pairs in chosen for _, answer in pairs])]
    else:
        counts = [output_len] * sum(len(pairs) for _, pairs in chosen)
    lens = iter(counts)
    raw = [(sid, [(q, max(next(lens), 1), think_time_s) for q, _ in pairs]) for sid, pairs in chosen]
    out = _assemble(raw, tok, f"{path} (--multi-turn)")
    if len(chosen) < num_prompts:
        out.notes.append(f"--num-prompts {num_prompts}: {path} holds {len(chosen):,} "
                         "conversations with a human turn and its answer; all are sent")
    return out
