"""The result file: written atomically, appended as vLLM appends, read back tolerantly.

`servelab.metrics.result` re-exports these functions beside the schema they store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError
from servelab.storage import write_atomic


def write_result(path: Path, result_json: dict[str, Any], append: bool) -> None:
    """Write a result JSON object to `path` atomically.

    The new content goes to a temporary file in the same directory, which then replaces
    `path` (``os.replace``), so a crash never leaves a half-written result. `append`
    mirrors vLLM's ``--append-result``: the object is added to the existing file as one
    more line (a newline first when the file is not empty), giving one JSON object per
    line. Parent directories are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = ""
    if append and path.exists():
        try:
            existing = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ServelabError(f"cannot read {path} to append to it: {exc}") from exc
    separator = "\n" if existing else ""
    payload = existing + separator + json.dumps(result_json)
    write_atomic(path, payload.encode("utf-8"))


def load_results(path: Path) -> list[dict[str, Any]]:
    """Every result object in a file: one JSON document (indented or not), or several
    written by `write_result(..., append=True)` (one per line, as vLLM appends them)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServelabError(f"cannot read result file {path}: {exc}") from exc
    decoder = json.JSONDecoder()
    results: list[dict[str, Any]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ServelabError(
                f"{path}: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})"
            ) from exc
        if not isinstance(obj, dict):
            line = text.count("\n", 0, pos) + 1
            raise ServelabError(f"{path}: line {line}: expected a JSON object")
        results.append(obj)
    if not results:
        raise ServelabError(f"{path}: no result in the file (it is empty)")
    return results


def load_result(path: Path) -> dict[str, Any]:
    """The latest result in a file (the last line of an appended file)."""
    return load_results(path)[-1]
