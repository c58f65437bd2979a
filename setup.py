"""Build hook: servelab is pure Python, and the simulator's hot modules are also compiled
to C with mypyc (the same sources; records identical, bench/sim_speed.py x1.5 on one
core). Metadata lives in pyproject.toml.

Compiling needs a C compiler; without one, or with SERVELAB_COMPILE=0, the install is pure
Python and says so. The build writes `servelab/sim/native.json` (each compiled module's
source digest) beside the extensions: `servelab.sim.native` loads the sources instead when
a source no longer matches its compiled module (an editable checkout after an edit) or
when SERVELAB_PURE_PYTHON=1.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
NATIVE = HERE / "src" / "servelab" / "sim" / "native.py"


def _native(name: str) -> object:
    """A constant of `servelab.sim.native`, read from its source (the build cannot import
    the package it builds): `COMPILED` (the event loop, the engine, its scheduler and its KV
    blocks), `MANIFEST`."""
    for node in ast.parse(NATIVE.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return ast.literal_eval(node.value)
    raise SystemExit(f"{NATIVE}: no {name}")


def _sources() -> list[Path]:
    names: tuple[str, ...] = _native("COMPILED")  # type: ignore[assignment]
    return [NATIVE.parent / f"{name}.py" for name in names]


class BuildCompiled(build_ext):
    """build_ext that leaves the install pure Python when the compiler fails, and writes
    the manifest of what it compiled."""

    def run(self) -> None:
        # a manifest left by an earlier compiled build would keep its modules in use
        root = HERE / "src" if self.inplace else Path(self.build_lib)
        out = root / "servelab" / "sim" / str(_native("MANIFEST"))
        out.unlink(missing_ok=True)
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 (no compiler, no headers: stay pure Python)
            print(f"servelab: the simulator stays pure Python (compiling failed: {exc})",
                  file=sys.stderr)
            return
        digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in _sources()}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def _ext_modules() -> list:
    """The mypyc extensions, only for commands that build (mypy's pass takes ~30 s; the
    metadata steps skip it)."""
    if os.environ.get("SERVELAB_COMPILE", "1") == "0":
        return []
    if not any(cmd in sys.argv for cmd in ("build_ext", "bdist_wheel", "editable_wheel", "build")):
        return []
    try:
        from mypyc.build import mypycify

        # mypy sees no third-party package in the isolated build env: numpy, pydantic and
        # the rest type as Any, which compiles to generic calls on them (C already)
        paths = [str(p.relative_to(HERE)) for p in _sources()]
        return mypycify(["--ignore-missing-imports", "--follow-imports=silent", *paths],
                        opt_level="3", group_name=str(_native("GROUP")))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 (stay pure Python)
        print(f"servelab: the simulator stays pure Python (mypyc: {exc!r})", file=sys.stderr)
        return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": BuildCompiled})
