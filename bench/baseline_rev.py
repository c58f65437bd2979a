"""Running a bench's measurement on another commit's code: that commit's `src/` extracted
with `git archive` into a temporary folder, and the bench script run again as a child
process with that folder first on PYTHONPATH, so that the old and the new code each run
in a process of their own (their own imports, their own peak memory) on inputs both
build from the same seed. The child prints its figures as one JSON line, last.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@contextmanager
def source_of(rev: str) -> Iterator[Path]:
    """The `src/` folder of commit `rev` of this repository, while the block runs."""
    with tempfile.TemporaryDirectory(prefix="servelab-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / "src"


def run_child(script: str, args: list[str], src: Path) -> dict:
    """`python script --child *args` with `src` first on PYTHONPATH: its last stdout line,
    parsed as JSON (the child inherits this process's CPU pinning)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = subprocess.run([sys.executable, script, "--child", *args], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
