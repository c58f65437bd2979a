"""The one exception type that reaches the user as a message, not a traceback, and how a
typed record's refusal becomes one."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError


class ServelabError(Exception):
    """A problem the user can fix (bad flag, missing file, unreachable target).

    The CLI prints ``error: <message>`` and exits with code 2. The message must name the
    problem precisely: the file and line or byte, the flag, the URL.
    """


def first_problem(exc: ValidationError) -> str:
    """A pydantic refusal as one line, ``key a.b: what is wrong`` (the first problem; an
    unknown key says so): the part of a `ServelabError` that names the key."""
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    what = "unknown key" if err["type"] == "extra_forbidden" else str(err["msg"]).removeprefix("Value error, ")
    return f"key {key}: {what}"


def failure_of(call: Callable[[], object] | None) -> str | None:
    """Run `call` (None: nothing to run); None when it succeeded, else its `ServelabError`'s
    message. For stops whose failure is reported, not raised (an actor's engine, a copy of a
    target), so one failure does not skip the rest."""
    if call is None:
        return None
    try:
        call()
    except ServelabError as exc:
        return str(exc)
    return None
