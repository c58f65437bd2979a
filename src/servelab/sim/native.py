"""Which build of the simulator's hot modules runs: compiled by mypyc, or their sources.

setup.py compiles the modules of `COMPILED` with mypyc where a C compiler is available (the
same sources: the same records, about 1.5x the speed on one core, `bench/sim_speed.py`) and
writes `native.json` beside them, each module's source digest. The compiled modules are used
only when every one of those sources still has the digest it was compiled from: compiled
modules call each other directly, so a stale one cannot be mixed with a fresh source, and
an editable checkout after an edit must run what it reads. `select()`, run by
`servelab.sim` before any of those modules is imported, puts a finder for their sources
ahead of the extensions otherwise, and when SERVELAB_PURE_PYTHON=1 (the reference the
compiled build is checked against).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# (setup.py reads this tuple from the source)
COMPILED = ("blocks", "engine", "scheduler", "offline")
MANIFEST = "native.json"
GROUP = "servelab_sim_native"  # mypyc's shared library of the four (setup.py's group_name)
PURE_ENV = "SERVELAB_PURE_PYTHON"


@dataclass(frozen=True, slots=True)
class Build:
    """What `select` chose: compiled modules or sources, and why."""

    compiled: bool
    reason: str  # e.g. "compiled with mypyc", "SERVELAB_PURE_PYTHON=1", "not compiled"

    def describe(self) -> str:
        return "compiled (mypyc)" if self.compiled else f"pure Python ({self.reason})"


def by_fields(obj: object) -> tuple[type, tuple[object, ...]]:
    """`__reduce__` for the frozen dataclasses of the compiled modules: compiled, such a
    class unpickles by setting its slots, which it refuses (Ray and the process pool
    pickle workloads and configurations); rebuilt from its fields instead, as its
    constructor takes them."""
    return type(obj), tuple(getattr(obj, f.name) for f in fields(obj))  # type: ignore[arg-type]


def _has_extension(directory: Path, name: str) -> bool:
    return any((directory / f"{name}{suffix}").exists()
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def inspect_build(directory: Path, env: Mapping[str, str],
                  names: Sequence[str] = COMPILED) -> Build:
    """The build to run for the modules `names` of `directory` (their `.py` sources, any
    extension modules and the manifest beside them), given the environment `env`."""
    if not any(_has_extension(directory, n) for n in names):
        return Build(False, "not compiled")
    if env.get(PURE_ENV, "") == "1":
        return Build(False, f"{PURE_ENV}={env[PURE_ENV]}")
    try:
        digests = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return Build(False, f"no readable {MANIFEST} beside the compiled modules")
    if importlib.util.find_spec(f"{GROUP}__mypyc") is None:
        return Build(False, f"{GROUP}__mypyc, the compiled modules' shared library, is missing")
    for n in names:
        if not _has_extension(directory, n):
            return Build(False, f"{n}.py is not compiled")
        source = directory / f"{n}.py"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        if digests.get(f"{n}.py") != digest:
            return Build(False, f"{n}.py changed since it was compiled; "
                                "reinstall to compile it again")
    return Build(True, "compiled with mypyc")


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the modules `names` (full names) as their `.py` files in `directory`, ahead
    of the extension modules there."""

    def __init__(self, directory: Path, names: frozenset[str]) -> None:
        self._directory = directory
        self._names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in self._names:
            return None
        return importlib.util.spec_from_file_location(
            fullname, self._directory / f"{fullname.rsplit('.', 1)[1]}.py")


def select(package: str = __package__ or "servelab.sim") -> Build:
    """Choose the build for this process (`inspect_build` on this package's directory and
    the environment); sources are found first unless the compiled modules are chosen."""
    directory = Path(__file__).resolve().parent
    if any(isinstance(f, _Sources) for f in sys.meta_path):
        # chosen already in this process: the sources are what is loaded
        return Build(False, "the sources were chosen earlier in this process")
    build = inspect_build(directory, os.environ)
    if not build.compiled and any(_has_extension(directory, n) for n in COMPILED):
        names = frozenset(f"{package}.{n}" for n in COMPILED)
        sys.meta_path.insert(0, _Sources(directory, names))
    return build
