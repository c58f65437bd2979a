"""From an incoming OpenAI request to what routing needs: the body is parsed once for
validation and for the few fields policies read; it is forwarded as the original bytes."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.openai_request import RequestError, parse_json, prompt_text, read_flag
from servelab.routing.records import RouteRequest


class BadRequest(Exception):
    """The client's request is malformed; the message says what is wrong (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Intake:
    """The parsed essentials of one request."""

    route: RouteRequest
    stream: bool


def parse_body(body: bytes, chat: bool, session_header: str | None) -> Intake:
    """Validate the JSON body and extract the routing fields; raise BadRequest naming the
    problem (`servelab.openai_request` reads the body, as the simulator's server does)."""
    try:
        obj = parse_json(body)
        prompt = prompt_text(obj, chat)
        stream = read_flag(obj, "stream")
    except RequestError as exc:
        raise BadRequest(exc.message) from None
    user = obj.get("user")
    session = session_header or (user if isinstance(user, str) and user else None)
    return Intake(RouteRequest(prompt, len(prompt), session), stream)
