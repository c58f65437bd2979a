"""Warm-ups share no prompt prefix with the measured requests."""

from __future__ import annotations

from servelab.workload.request import ChatMessage, RequestSpec
from servelab.workload.warmup import warmup_marker, warmup_requests


def test_warmups_cycle_the_first_requests_with_a_marker_in_front() -> None:
    reqs = [RequestSpec(i, f"prompt {i}", None, 10 + i, 5) for i in range(3)]
    warm = warmup_requests(reqs, 4)
    assert [w.prompt for w in warm] == [
        "[warm-up 0] prompt 0", "[warm-up 1] prompt 1", "[warm-up 2] prompt 2",
        "[warm-up 3] prompt 0"]
    assert [(w.prompt_len, w.output_len) for w in warm] == [(10, 5), (11, 5), (12, 5), (10, 5)]
    assert not any(w.prompt[:5] == r.prompt[:5] for w in warm for r in reqs)  # type: ignore[index]


def test_chat_warmups_mark_the_first_message_only() -> None:
    msgs = (ChatMessage("system", "be brief"), ChatMessage("user", "hi"))
    warm = warmup_requests([RequestSpec(0, None, msgs, 4, 2)], 1)
    assert warm[0].messages == (ChatMessage("system", warmup_marker(0) + "be brief"),
                                ChatMessage("user", "hi"))


def test_no_requests_or_no_warmups_give_none() -> None:
    assert warmup_requests([], 3) == []
    assert warmup_requests([RequestSpec(0, "p", None, 1, 1)], 0) == []
