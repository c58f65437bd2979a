"""Sending multi-turn sessions: each turn after its predecessor's answer, with the history.

A session starts at its arrival time (`servelab.workload.arrivals.schedule_s`: the
rate, burstiness and seed apply to sessions' first turns). Turn k > 0 is due when turn
k-1's answer has fully arrived plus the turn's think time; it carries every earlier user
message and the text the server actually answered to each (`RequestRecord.generated_text`),
so the prefix the server can reuse is the one a real chat produces. A turn's `prompt_len` is
its history's tokens: the user messages' counts (the workload's tokenizer) plus the earlier
answers' `output_len` (the server's own count of what it generated).

`max_concurrency` caps sessions in progress (a user holds a slot from the first turn's send
until the last answer, think times included), so requests in flight never exceed it
either; a session waiting for a slot records that wait as its first turn's `slot_wait_ms`.
A failed turn ends its session: its later turns are not sent and get records with
`error_kind` "session_broken", so every planned turn appears once in the result. Setting
`stop` ends the run: turns in flight are cancelled, later turns are not sent (no records).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from servelab.client.sender import ScheduleSender, SendControls, release_heap
from servelab.client.target import TargetConfig
from servelab.metrics.records import RequestRecord
from servelab.workload.request import ChatMessage, RequestSpec
from servelab.workload.sessions import Session
from servelab.workload.warmup import warmup_requests


class _SessionRun:
    """One run's shared state: the sender, t0, the session cap and the stop event."""

    def __init__(self, sender: ScheduleSender, requests: Sequence[RequestSpec], t0: float,
                 cap: asyncio.Semaphore | None, stop: asyncio.Event | None,
                 sent: list[RequestSpec] | None) -> None:
        self.sent = sent
        self.sender = sender
        self.requests = requests
        self.t0 = t0
        self.cap = cap
        self.stop = stop

    async def _until(self, due: float) -> None:
        delay = due - self.sender.clock()
        if delay > 0:
            await asyncio.sleep(delay)

    async def session(self, session: Session, start_s: float, sink: list[RequestRecord]) -> None:
        """Send `session`'s turns in order, appending each turn's record to `sink`."""
        clock = self.sender.clock
        due = self.t0 + start_s
        await self._until(due)
        slot_wait_ms = 0.0
        if self.cap is not None:
            await self.cap.acquire()
            slot_wait_ms = max(0.0, clock() - due) * 1000.0
        try:
            await self._turns(session, start_s, slot_wait_ms, sink)
        finally:
            if self.cap is not None:
                self.cap.release()

    async def _turns(self, session: Session, start_s: float, slot_wait_ms: float,
                     sink: list[RequestRecord]) -> None:
        clock = self.sender.clock
        history: list[ChatMessage] = []
        carried = 0  # tokens of the history before this turn
        intended = start_s
        answered_at = 0.0
        for k, turn in enumerate(session.turns):
            own = self.requests[turn.index]
            if k:
                due = answered_at + turn.think_time_s
                await self._until(due)
                intended, slot_wait_ms = due - self.t0, 0.0
            assert own.messages is not None  # session turns are chat requests
            history.extend(own.messages)
            spec = RequestSpec(turn.index, None, tuple(history), carried + own.prompt_len,
                               own.output_len)
            if self.sent is not None:
                self.sent.append(spec)
            rec = await self.sender.send_now(spec, intended, slot_wait_ms, self.t0)
            sink.append(rec)
            if self.stop is not None and self.stop.is_set():
                return
            if not rec.success or rec.generated_text is None:
                why = rec.error_kind or "no answer text"
                self._broken(session, k, why, sink)
                return
            history.append(ChatMessage("assistant", rec.generated_text))
            carried = spec.prompt_len + rec.output_len
            answered_at = clock()

    def _broken(self, session: Session, failed_turn: int, why: str,
                sink: list[RequestRecord]) -> None:
        now_s = self.sender.clock() - self.t0
        status = self.sender.status
        for turn in session.turns[failed_turn + 1:]:
            own = self.requests[turn.index]
            sink.append(RequestRecord(
                index=turn.index, prompt_len=own.prompt_len, intended_send_s=now_s, send_s=now_s,
                expected_output_len=own.output_len, error_kind="session_broken",
                error=f"not sent: turn {failed_turn} of session {session.session_id} failed ({why})"))
            status.failed += 1
            if self.sender.on_progress is not None:
                self.sender.on_progress(status)


async def send_sessions(
    target: TargetConfig,
    requests: Sequence[RequestSpec],
    sessions: Sequence[Session],
    start_s: Sequence[float],
    max_concurrency: int | None = None,
    num_warmups: int = 0,
    controls: SendControls = SendControls(),
    sent: list[RequestSpec] | None = None,
) -> list[RequestRecord]:
    """Send `sessions` (turns are `requests[turn.index]`), session i starting at
    `start_s[i]` s after t0; return the warm-up records, then one record per turn.

    Warm-ups are the first `num_warmups` sessions' first turns with a marker (single
    requests, as `send_schedule`'s); `controls` works as there.
    `sent`, when given, receives every turn's request as it was sent (history included).
    """
    if len(start_s) != len(sessions):
        raise ValueError("sessions and start_s differ in length")
    # Later turns carry the answers' text, so the client must keep it, whatever the caller set.
    target = dataclasses.replace(target, keep_text=True)
    stop = controls.stop
    async with ScheduleSender(target, max_concurrency, controls.on_progress, controls.clock) as sender:
        firsts = [requests[s.turns[0].index] for s in sessions]
        records, t0 = await sender.start(len(sessions), warmup_requests(firsts, num_warmups),
                                         controls.before_t0, controls.on_start)
        try:
            cap = asyncio.Semaphore(max_concurrency) if max_concurrency else None
            run = _SessionRun(sender, requests, t0, cap, stop, sent)
            sinks: list[list[RequestRecord]] = [[] for _ in sessions]
            tasks = [asyncio.ensure_future(run.session(s, at, sink))
                     for s, at, sink in zip(sessions, start_s, sinks)]
            if stop is None:
                await asyncio.gather(*tasks)
            else:
                stopper = asyncio.ensure_future(stop.wait())
                all_done = asyncio.ensure_future(asyncio.wait(tasks))
                await asyncio.wait({all_done, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                for t in tasks:
                    if not t.done():
                        t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await all_done
                for t in tasks:  # a bug in a session's own code, not a request's failure
                    if not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
        finally:
            release_heap()
        for sink in sinks:
            records.extend(sink)
        return records


def detailed_columns(requests: Sequence[RequestSpec], sessions: Sequence[Session],
                     records: Sequence[RequestRecord]) -> dict[str, list[object]]:
    """Session id and turn number (0-based) of each measured record, in the order of the
    result's per-request lists (by request index; warm-ups left out), for --save-detailed."""
    where = {t.index: (s.session_id, k) for s in sessions for k, t in enumerate(s.turns)}
    measured = sorted((r for r in records if not r.warmup), key=lambda r: r.index)
    return {"session_ids": [where[r.index][0] for r in measured],
            "session_turns": [where[r.index][1] for r in measured]}
