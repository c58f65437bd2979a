"""The one reader of OpenAI request bodies: what each prompt form means, and errors that name
the field (the router, the simulator's server and the token server all read through it)."""

from __future__ import annotations

import pytest

from servelab.openai_request import (
    Prompt,
    RequestError,
    parse_json,
    prompt_text,
    read_flag,
    read_messages,
    read_positive_int,
    read_prompts,
)
from servelab.workload.request import ChatMessage


def test_every_prompt_form_reads_as_vllm_takes_it() -> None:
    assert read_prompts({"prompt": "hello world"}) == (Prompt("hello world", None),)
    assert read_prompts({"prompt": [5, 0, 7]}) == (Prompt(None, (5, 0, 7)),)
    assert read_prompts({"prompt": ["a", [1, 2]]}) == (Prompt("a", None), Prompt(None, (1, 2)))
    assert prompt_text({"prompt": ["a b", [1, 2]]}, chat=False) == "a b\n1 2"


def test_chat_contents_are_text_or_text_parts() -> None:
    body = {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "hi "},
                                                      {"type": "image_url", "image_url": {}},
                                                      {"type": "text", "text": "there"}]},
                         {"role": "assistant", "content": None}]}
    assert read_messages(body) == (ChatMessage("system", "be brief"), ChatMessage("user", "hi there"),
                                   ChatMessage("assistant", ""))
    assert prompt_text(body, chat=True) == "be brief\nhi there\n"


@pytest.mark.parametrize(("call", "param", "message"), [
    (lambda: parse_json(b'{"prompt": '), None, "not valid JSON"),
    (lambda: parse_json(b"[1]"), None, "must be a JSON object"),
    (lambda: read_prompts({}), "prompt", "'prompt' is required"),
    (lambda: read_prompts({"prompt": []}), "prompt", "'prompt' must be a string"),
    (lambda: read_prompts({"prompt": [1, -2]}), "prompt", "'prompt' must be a string"),
    (lambda: read_messages({"messages": []}), "messages", "'messages' must be a non-empty list."),
    (lambda: read_messages({"messages": [{"content": "x"}]}), "messages", "messages[0] must be an object with a 'role'"),
    (lambda: read_messages({"messages": [{"role": "user", "content": 3}]}), "messages", "messages[0].content"),
    (lambda: read_flag({"stream": "yes"}, "stream"), "stream", "'stream' must be true or false"),
    (lambda: read_positive_int({"max_tokens": 0}, "max_tokens"), "max_tokens", "integer >= 1"),
])
def test_malformed_bodies_name_their_field(call, param: str | None, message: str) -> None:
    with pytest.raises(RequestError) as err:
        call()
    assert err.value.param == param and message in err.value.message


def test_absent_fields_take_their_defaults() -> None:
    assert read_flag({}, "stream") is False and read_flag({"stream": None}, "stream") is False
    assert read_positive_int({"max_tokens": None, "max_completion_tokens": 9}, "max_tokens",
                             "max_completion_tokens") == 9
    assert read_positive_int({}, "max_tokens") is None
