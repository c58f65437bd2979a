"""A request rate in requests/s, and the one place it meets JSON.

`inf` (every request at once) is not a JSON number; vLLM's result files write it as the
string "inf", so servelab's files (results, cells) do too, and read it back here. In memory
a rate is always a float.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer


def rate_to_json(rate: float) -> float | str:
    """`rate` (requests/s) as a JSON value: "inf" for infinity, else the number."""
    return "inf" if math.isinf(rate) else rate


def rate_from_json(value: object) -> float:
    """A JSON rate back as requests/s: "inf" or a number (ValueError on anything else)."""
    if value == "inf":
        return math.inf
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"a request rate is a number or \"inf\", got {value!r}")


# A pydantic field type: read from a number or "inf", written back the same way in JSON.
RequestRate = Annotated[float, BeforeValidator(rate_from_json),
                        PlainSerializer(rate_to_json, when_used="json")]
