"""Reading a dataset file line by line, with errors that name the file and the line.

Every line-oriented reader (custom, spec_bench, sessions, timed_trace JSONL, the CSVs) goes
through here, so a bad line always reads `FILE:LINE: problem` and never as a traceback.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from servelab.errors import ServelabError


def require_file(path: Path, dataset: str) -> Path:
    """`path` when it is a readable file, else a ServelabError naming the flag and dataset."""
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "no such file"
        raise ServelabError(f"--dataset-path {path}: {what} (--dataset-name {dataset})")
    return path


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON Lines file.

    A line that is not UTF-8, not JSON, or not a JSON object raises ServelabError
    `FILE:LINE: ...`.
    """
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise ServelabError(f"--dataset-path {path}: {exc.strerror or exc}") from None
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ServelabError(f"{path}:{lineno}: not UTF-8 text ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ServelabError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
                ) from None
            if not isinstance(obj, dict):
                raise ServelabError(
                    f"{path}:{lineno}: expected a JSON object, found {type(obj).__name__}"
                )
            yield lineno, obj


def csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data row of a CSV file with a header row.

    The header must hold every column in `required` (else ServelabError naming the file,
    the missing columns and the header found).
    """
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise ServelabError(f"--dataset-path {path}: {exc.strerror or exc}") from None
    with fh:
        try:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in required if c not in header]
            if missing:
                raise ServelabError(
                    f"{path}:1: CSV header lacks {', '.join(repr(c) for c in missing)} "
                    f"(found: {', '.join(repr(h) for h in header) or 'nothing'})"
                )
            reader.fieldnames = header
            for row in reader:
                yield reader.line_num, row
        except UnicodeDecodeError as exc:
            raise ServelabError(f"{path}: not UTF-8 text ({exc.reason})") from None
        except csv.Error as exc:
            raise ServelabError(f"{path}:{reader.line_num}: bad CSV ({exc})") from None


def int_field(path: Path, lineno: int, key: str, value: object, minimum: int) -> int:
    """`value` as an integer >= `minimum` (JSON ints, or CSV text of one), else a
    ServelabError `FILE:LINE: 'key' ...`."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            pass
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ServelabError(
            f"{path}:{lineno}: {key!r} must be an integer >= {minimum} (got {value!r})"
        )
    return value
