"""A `servelab` command line's wall time, CPU time and peak memory against another
commit's, in interleaved rounds, each round's order alternating (this VM's runs of one tree minutes apart differ by more
than most changes: only interleaved runs compare).

Each run is a child process `python -m servelab ARGS...`: this checkout's code, or
`--baseline-rev`'s `src/` (`baseline_rev.source_of`) first on PYTHONPATH. The baseline gets
this install's compiled simulator modules beside its sources; where its compiled modules'
sources differ from the ones compiled, `servelab.sim.native` runs them as Python and the
output's build line says so, which this script prints. Per run: wall, user and system
seconds and peak RSS (`os.wait4`); then the means' ratio and whether every run's stdout
was the same.

    taskset -c 1 .venv/bin/python bench/cli_speed.py --baseline-rev HEAD~1 --rounds 2 -- \\
        sim run --gpu H200 --model Qwen/Qwen3-14B --replicas 64 --router-policy round_robin \\
        --dataset-name random --random-input-len 220 --random-output-len 200 \\
        --random-range-ratio 0.9 --num-prompts 1000000 --request-rate 280
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from baseline_rev import REPO, source_of

NATIVE_DIR = Path("servelab") / "sim"


@dataclass(frozen=True, slots=True)
class Run:
    """One child's figures: seconds of wall, user and system time, peak RSS in GB."""

    wall_s: float
    user_s: float
    sys_s: float
    peak_gb: float
    stdout_sha256: str


def _with_compiled(src: Path) -> None:
    """Put this install's compiled simulator modules (extensions, their shared library,
    the manifest of the sources they were compiled from) beside the sources in `src`."""
    here = REPO / "src"
    for f in (here / NATIVE_DIR).glob("*.so"):
        shutil.copy2(f, src / NATIVE_DIR / f.name)
    manifest = here / NATIVE_DIR / "native.json"
    if manifest.exists():
        shutil.copy2(manifest, src / NATIVE_DIR / manifest.name)
    for f in here.glob("servelab_sim_native__mypyc*.so"):
        shutil.copy2(f, src / f.name)


def run_once(args: list[str], src: Path, out_dir: Path) -> tuple[Run, str]:
    """`python -m servelab *args` with `src` first on PYTHONPATH, in this process's working
    directory (relative paths in `args` mean what they mean here); stdout and stderr go to
    files in `out_dir`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryFile(dir=out_dir) as out, tempfile.TemporaryFile(dir=out_dir) as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "servelab", *args], env=env, stdout=out,
                                stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"servelab {' '.join(args)} exited {proc.returncode}:\n"
                             f"{err.read().decode(errors='replace')[-2000:]}")
        # ru_maxrss is in KiB on Linux
        text = out.read()
        return Run(wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss * 1024 / 1e9,
                   hashlib.sha256(text).hexdigest()), _build_line(text)


def _build_line(stdout: bytes) -> str:
    """The output's line naming the simulator's build (compiled or pure Python)."""
    for line in stdout.decode(errors="replace").splitlines():
        if "compiled (mypyc)" in line or "pure Python (" in line:
            return line.strip()
    return "(no build line in the output)"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def main() -> None:
    """Parse the flags, run the rounds, print each run and the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-rev", required=True, help="git revision to compare with, e.g. HEAD~1")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (baseline, then this tree)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the servelab command line")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    if not args:
        ap.error("give the servelab command line after --")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    runs: dict[str, list[Run]] = {"baseline": [], "this tree": []}
    builds: dict[str, str] = {}
    with source_of(a.baseline_rev) as old_src, tempfile.TemporaryDirectory(prefix="cli-speed-") as tmp:
        _with_compiled(old_src)
        srcs = {"baseline": old_src, "this tree": REPO / "src"}
        for i in range(a.rounds):
            # alternate which runs first, so neither always follows the other
            order = list(srcs) if i % 2 == 0 else list(srcs)[::-1]
            for name in order:
                r, builds[name] = run_once(args, srcs[name], Path(tmp))
                runs[name].append(r)
                print(f"round {i + 1} {name:9}: {r.wall_s:8.1f} s wall, {r.user_s:7.1f} s user, "
                      f"{r.sys_s:6.1f} s system, {r.peak_gb:5.2f} GB peak", flush=True)
    for name in runs:
        print(f"{name} ({a.baseline_rev if name == 'baseline' else 'working tree'}): {builds[name]}")
    old, new = runs["baseline"], runs["this tree"]
    print(f"mean wall {_mean([r.wall_s for r in old]):.1f} -> {_mean([r.wall_s for r in new]):.1f} s "
          f"(x{_mean([r.wall_s for r in old]) / _mean([r.wall_s for r in new]):.3f}); "
          f"user {_mean([r.user_s for r in old]):.1f} -> {_mean([r.user_s for r in new]):.1f} s; "
          f"peak {max(r.peak_gb for r in old):.2f} -> {max(r.peak_gb for r in new):.2f} GB")
    same = len({r.stdout_sha256 for r in old + new}) == 1
    print("stdout identical in every run: " + ("yes" if same else "NO"))


if __name__ == "__main__":
    main()
