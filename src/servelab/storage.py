"""Writing output files: checked before work starts, written atomically when produced.

`check_writable` is called before a command measures or fits anything, so a bad path
costs nothing; `write_atomic` writes through a temporary file in the same folder, fsyncs
it and renames it over the target, so a reader never sees half a file and a crash
leaves the old one. Files get the mode the umask allows (mkstemp alone gives 0600).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError


def _umask() -> int:
    # os.umask can only be read by setting it; restored at once (single-threaded callers).
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_writable(path: Path, flag: str) -> None:
    """Raise `ServelabError` naming `flag` unless `path` can be created or replaced."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ServelabError(f"{flag}: {path} is a folder, not a file")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ServelabError(f"{flag}: {path}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ServelabError(f"{flag}: {path}: {probe} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise ServelabError(f"{flag}: {path} is not writable")


TMP_SUFFIX = ".tmp"  # a crash can leave `.<name>.<random>.tmp` behind; never a half file


def check_writable_dir(folder: Path, flag: str) -> None:
    """Raise `ServelabError` naming `flag` unless files can be created in `folder` (made
    when it does not exist yet)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ServelabError(f"{flag}: {folder}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ServelabError(f"{flag}: {folder}: {probe} is not writable")


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path`: temp file in the same folder, fsync, rename (umask mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path, flag: str | None = None) -> Any:
    """A JSON file's content; `ServelabError` naming `flag` (when a flag named the file),
    the file and the line otherwise."""
    where = f"{flag}: {path}" if flag else str(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ServelabError(f"{where} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise ServelabError(f"{where}: line {exc.lineno}: not valid JSON ({exc.msg})") from exc
    except OSError as exc:
        raise ServelabError(f"{where}: cannot read it ({exc.strerror or exc})") from exc


def write_json_atomic(path: Path, data: Any, indent: int | None = 1) -> None:
    """`data` as JSON (NaN and infinity as JSON's extensions, as vLLM writes them) by
    `write_atomic`."""
    write_atomic(path, json.dumps(data, indent=indent, allow_nan=True).encode("utf-8"))
