"""The simulator's compiled build (`servelab.sim.native`): which build a directory gives,
that the compiled modules give the records their sources give, and that their frozen
records survive pickling (Ray and the process pool send them)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import pickle
import random
from array import array
from pathlib import Path

import numpy as np
import pytest

import servelab.sim
from servelab.plan import EngineArgs
from servelab.sim.engine import EngineStats, SimRequest, StepResult, TokenEvent
from servelab.sim.native import MANIFEST, PURE_ENV, inspect_build
from servelab.sim.offline import OfflineRequest, PreparedWorkload
from servelab.sim.setup import SimOptions, build_cluster

from conftest import run_servelab

NAMES = ("alpha", "beta")


def _built(tmp_path: Path, compiled: tuple[str, ...] = NAMES, manifest: bool = True) -> Path:
    """A package directory with sources `NAMES`, extension files for `compiled` and a
    manifest of the sources' digests as the build writes it."""
    for n in NAMES:
        (tmp_path / f"{n}.py").write_text(f"NAME = {n!r}\n")
    for n in compiled:
        (tmp_path / f"{n}{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    if manifest:
        digests = {f"{n}.py": hashlib.sha256((tmp_path / f"{n}.py").read_bytes()).hexdigest()
                   for n in NAMES}
        (tmp_path / MANIFEST).write_text(json.dumps(digests))
    return tmp_path


def test_a_fresh_build_is_compiled(tmp_path: Path) -> None:
    b = inspect_build(_built(tmp_path), {}, NAMES)
    assert b.compiled and b.describe() == "compiled (mypyc)"


def test_sources_without_extensions_are_not_compiled(tmp_path: Path) -> None:
    b = inspect_build(_built(tmp_path, compiled=(), manifest=False), {}, NAMES)
    assert not b.compiled and b.describe() == "pure Python (not compiled)"


def test_an_edited_source_makes_the_whole_build_pure(tmp_path: Path) -> None:
    d = _built(tmp_path)
    (d / "beta.py").write_text("NAME = 'edited'\n")
    b = inspect_build(d, {}, NAMES)
    assert not b.compiled and "beta.py changed since it was compiled" in b.reason


def test_the_environment_asks_for_the_sources(tmp_path: Path) -> None:
    d = _built(tmp_path)
    assert not inspect_build(d, {PURE_ENV: "1"}, NAMES).compiled
    assert inspect_build(d, {PURE_ENV: "0"}, NAMES).compiled


def test_a_missing_manifest_or_module_falls_back_to_the_sources(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    no_manifest = inspect_build(_built(tmp_path / "a", manifest=False), {}, NAMES)
    assert not no_manifest.compiled and MANIFEST in no_manifest.reason
    partial = inspect_build(_built(tmp_path / "b", compiled=("alpha",)), {}, NAMES)
    assert not partial.compiled and partial.reason == "beta.py is not compiled"


def test_frozen_records_survive_pickling() -> None:
    req = OfflineRequest(3, array("I", [5, 6, 7]), 9, "text", "s1")
    wl = PreparedWorkload([req], np.arange(1.0), "tok", "builtin", ("a note",))
    opts = SimOptions("Qwen/Qwen3-0.6B", "H200", None, EngineArgs())
    cluster = build_cluster(opts, random.Random(0))
    config = cluster.engines[0].config
    limits = cluster.engines[0].scheduler.limits
    for obj in (req, config, limits):
        assert pickle.loads(pickle.dumps(obj)) == obj
    back = pickle.loads(pickle.dumps(wl))
    assert back.requests == [req] and back.notes == ("a note",) and list(back.intended_s) == [0.0]

    # The engine's own records: what a step gives back, the counters, a request; with every
    # field set, so a field the pickle lost or reordered shows.
    event = TokenEvent("r1", 2, True, False, "length")
    step = StepResult(1.5, 0.02, (event,), 3, 40, 2, 0.25, 3, 1, 4)
    stats = EngineStats(3, 1, 0.25, 4, 100, 60, 300, 50, 1000, 16)
    sim_req = SimRequest("r1", (5, 6, 7), 9, 0.5)
    for obj in (event, step, stats, sim_req):
        assert pickle.loads(pickle.dumps(obj)) == obj, type(obj).__name__


def _details(*args: str, pure: bool) -> dict:
    env = {PURE_ENV: "1" if pure else "0"}
    proc = run_servelab("sim", "run", "--json", "--save-detailed", *args, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert ("simulator build: pure Python" in proc.stderr) == pure, proc.stderr
    data = json.loads(proc.stdout.splitlines()[-1])
    return {k: v for k, v in data.items() if k not in ("date", "timestamp")}


# Runs that go through the compiled paths: a fleet replica alone (round robin), the shared
# heap (least requests), speculation, a disaggregated pair, a client limit with the loop's
# shortcuts.
CASES = [
    ("--gpu", "H200", "--model", "Qwen/Qwen3-14B", "--replicas", "4", "--router-policy",
     "round_robin", "--dataset-name", "random", "--random-input-len", "220",
     "--random-output-len", "200", "--random-range-ratio", "0.9", "--num-prompts", "400",
     "--request-rate", "40"),
    ("--gpu", "H200", "--model", "Qwen/Qwen3-4B", "--replicas", "2", "--router-policy",
     "least_requests", "--dataset-name", "random", "--random-input-len", "512",
     "--random-output-len", "64", "--num-prompts", "200", "--max-concurrency", "32"),
    ("--gpu", "H200", "--model", "Qwen/Qwen3-4B", "--dataset-name", "random",
     "--random-input-len", "128", "--random-output-len", "64", "--num-prompts", "60",
     "--max-concurrency", "8", "--speculative-config",
     '{"method": "ngram", "num_speculative_tokens": 3}', "--spec-acceptance", "0.8,0.6,0.4"),
    ("--gpu", "H200", "--model", "Qwen/Qwen3-0.6B", "--dataset-name", "random",
     "--random-input-len", "1024", "--random-output-len", "32", "--num-prompts", "80",
     "--request-rate", "20", "--disaggregated",
     '{"prefill": {"replicas": 1}, "decode": {"replicas": 2}, "link": "nvlink"}'),
    ("--gpu", "L40S", "--model", "Qwen/Qwen3-14B", "--dataset-name", "random",
     "--random-input-len", "300", "--random-output-len", "150", "--random-range-ratio", "0.8",
     "--num-prompts", "150", "--request-rate", "10", "--max-concurrency", "10"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES,
                         ids=["fleet-rr", "least-requests", "spec", "pd", "l40s-c10"])
def test_the_compiled_build_gives_the_sources_records(case: tuple[str, ...]) -> None:
    if not servelab.sim.BUILD.compiled:
        if os.environ.get("SERVELAB_REQUIRE_COMPILED") == "1":
            pytest.fail(f"the simulator is {servelab.sim.BUILD.describe()}; "
                        "`pip install -e .` with a C compiler compiles it")
        pytest.skip(f"the simulator is {servelab.sim.BUILD.describe()}")
    compiled, pure = _details(*case, pure=False), _details(*case, pure=True)
    assert compiled["completed"] > 0 and len(compiled["itls"]) == compiled["completed"]
    assert compiled == pure
