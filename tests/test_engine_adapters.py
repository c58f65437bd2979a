"""Engine adapters without launching: arms, command lines, GPU pinning, flag validation.

Flag validation reads recorded help texts: vLLM 0.32.0 CPU's real `serve --help=all`
(tests/data/engine/vllm-0.32.0-cpu-serve-help-all.txt) and a reconstructed SGLang
`launch_server --help` (SGLang cannot be installed here), placed where the launchers cache
them, so the launchers read them instead of asking an engine.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from servelab.engine import ArmLaunch, NodeRank, SglangLauncher, SglangRuntime, SimLauncher, VllmLauncher, VllmRuntime
from servelab.engine.flags import cached_help, check_flags, flag_names, flag_of, parse_help_options
from servelab.engine.launcher import gpu_waves
from servelab.errors import ServelabError

DATA = Path(__file__).parent / "data" / "engine"
VLLM_HELP = DATA / "vllm-0.32.0-cpu-serve-help-all.txt"
SGLANG_HELP = DATA / "sglang-launch-server-help-reconstructed.txt"
VLLM_VERSION = "0.32.0+cpu"
SGLANG_VERSION = "0.4.6"


@pytest.fixture
def vllm_dir(tmp_path: Path) -> Path:
    shutil.copy(VLLM_HELP, tmp_path / f"vllm-{VLLM_VERSION}-serve-help-all.txt")
    return tmp_path


@pytest.fixture
def sglang_dir(tmp_path: Path) -> Path:
    shutil.copy(SGLANG_HELP, tmp_path / f"sglang-{SGLANG_VERSION}-launch-server-help.txt")
    return tmp_path


def arm(**kw) -> ArmLaunch:
    return ArmLaunch(**{"name": "a", "model": "/models/qwen3", **kw})


# --- arms -------------------------------------------------------------------------------

def test_arm_rejects_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="tensor_paralel_size"):
        ArmLaunch(name="a", model="m", tensor_paralel_size=2)


def test_arm_gpus_must_cover_replicas_times_tp_times_pp() -> None:
    with pytest.raises(ValidationError, match=r"gpus lists 3 GPU\(s\) but 2 replica\(s\) x TP 2 x PP 1 need 4"):
        arm(replicas=2, tensor_parallel_size=2, gpus=[0, 1, 2])


def test_arm_name_must_be_a_safe_file_name() -> None:
    with pytest.raises(ValidationError, match="arm name"):
        arm(name="../x")


def test_replica_gpus_are_consecutive_slices() -> None:
    a = arm(replicas=2, tensor_parallel_size=2, gpus=[4, 5, 6, 7])
    assert [a.replica_gpus(r) for r in range(2)] == [[4, 5], [6, 7]]
    b = arm(replicas=3, pipeline_parallel_size=2)
    assert [b.replica_gpus(r) for r in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert arm().replica_gpus(0) is None


def test_vllm_pins_cuda_visible_devices_per_replica() -> None:
    launcher = VllmLauncher(VllmRuntime(env={"VLLM_NO_USAGE_STATS": "1"}))
    a = arm(replicas=2, tensor_parallel_size=2, gpus=[4, 5, 6, 7], env={"HF_HUB_OFFLINE": "1"})
    envs = [launcher.replica_env(a, r) for r in range(2)]
    assert envs == [
        {"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "4,5"},
        {"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "6,7"},
    ]
    assert "CUDA_VISIBLE_DEVICES" not in launcher.replica_env(arm(), 0)


def test_pinning_and_env_cuda_visible_devices_conflict() -> None:
    a = arm(gpus=[1], env={"CUDA_VISIBLE_DEVICES": "0"})
    with pytest.raises(ServelabError, match="CUDA_VISIBLE_DEVICES"):
        VllmLauncher().replica_env(a, 0)


def test_replicas_sharing_a_gpu_start_one_after_another() -> None:
    assert gpu_waves(arm(replicas=2, gpus=[0, 0], gpu_memory_utilization=0.45)) == [[0], [1]]
    assert gpu_waves(arm(replicas=3)) == [[0, 1, 2]]
    assert gpu_waves(arm()) == [[0]]


def test_kv_cache_space_must_be_whole_gib() -> None:
    with pytest.raises(ServelabError, match="VLLM_CPU_KVCACHE_SPACE=''"):
        VllmLauncher(VllmRuntime(env={"VLLM_CPU_KVCACHE_SPACE": ""}))
    with pytest.raises(ServelabError, match="VLLM_CPU_KVCACHE_SPACE='0.5'"):
        VllmLauncher().replica_env(arm(env={"VLLM_CPU_KVCACHE_SPACE": "0.5"}), 0)


# --- vLLM command line ------------------------------------------------------------------

def test_vllm_serve_command_per_replica(vllm_dir: Path) -> None:
    a = arm(served_model_name="tiny", quantization="awq", tensor_parallel_size=2, replicas=2,
            gpu_memory_utilization=0.45, load_format="dummy", port_base=8100,
            extra_args=["--max-num-seqs", "8"])
    commands = VllmLauncher().validate(a, vllm_dir, VLLM_VERSION)
    assert commands[1].argv == [
        "vllm", "serve", "/models/qwen3", "--served-model-name", "tiny", "--quantization", "awq",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--gpu-memory-utilization", "0.45", "--load-format", "dummy",
        "--host", "127.0.0.1", "--port", "8101", "--max-num-seqs", "8",
    ]
    assert commands[1].url == "http://127.0.0.1:8101"
    assert commands[1].log_path == vllm_dir / "a-replica1.log"
    assert commands[1].env["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_vllm_module_form_as_the_h200_kit_runs_it(vllm_dir: Path) -> None:
    runtime = VllmRuntime(python="python3", env={"PYTHONPATH": "/tmp/site"})
    commands = VllmLauncher(runtime).validate(arm(), vllm_dir, VLLM_VERSION)
    assert commands[0].argv[:5] == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/qwen3"]
    assert commands[0].env["PYTHONPATH"] == "/tmp/site"
    assert runtime.help_argv() == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help=all"]


def test_vllm_refuses_a_vanished_flag_with_the_closest_names(vllm_dir: Path) -> None:
    a = arm(extra_args=["--disable-log-requests", "--max-num-seqz", "4"])
    with pytest.raises(ServelabError) as err:
        VllmLauncher().validate(a, vllm_dir, VLLM_VERSION)
    message = str(err.value)
    assert message.startswith(f"unknown flag(s) for vllm {VLLM_VERSION} serve (--help=all): ")
    assert "--disable-log-requests (closest: --enable-log-requests, --disable-log-stats" in message
    assert "--max-num-seqz (closest: --max-num-seqs" in message


def test_vllm_accepts_its_own_spellings(vllm_dir: Path) -> None:
    extra = ["--max_num_seqs=8", "-O0", "-cc.mode=none", "--no-enable-prefix-caching",
             "--enforce-eager", "--kv-cache-memory-bytes", "1000000", "--override-generation-config",
             '{"temperature": -1}', "--seed", "-1"]
    commands = VllmLauncher().validate(arm(extra_args=extra), vllm_dir, VLLM_VERSION)
    # every spelling (underscores, =value, short forms, -cc.key, negatives) is passed through as
    # written, after the arm's own flags
    assert commands[0].argv[-len(extra):] == extra


@pytest.mark.parametrize(("extra", "field"), [
    (["--port", "9000"], "port_base"),
    (["-tp", "2"], "tensor_parallel_size"),
    (["--gpu_memory_utilization=0.5"], "gpu_memory_utilization"),
    (["--served-model"], "served_model_name"),  # a prefix argparse would expand
])
def test_extra_args_may_not_repeat_an_arm_field(vllm_dir: Path, extra: list[str], field: str) -> None:
    with pytest.raises(ServelabError, match=f"set the arm's `{field}` instead"):
        VllmLauncher().validate(arm(extra_args=extra), vllm_dir, VLLM_VERSION)


# --- SGLang command line ----------------------------------------------------------------

def test_sglang_launch_command(sglang_dir: Path) -> None:
    runtime = SglangRuntime(python="/opt/sgl/bin/python")
    a = arm(served_model_name="tiny", tensor_parallel_size=2, gpus=[2, 3], gpu_memory_utilization=0.8,
            load_format="dummy", port_base=30000, extra_args=["--enable-metrics", "--max-running-requests", "64"])
    [cmd] = SglangLauncher(runtime).validate(a, sglang_dir, SGLANG_VERSION)
    assert cmd.argv == [
        "/opt/sgl/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/qwen3",
        "--served-model-name", "tiny", "--tp-size", "2", "--pp-size", "1",
        "--mem-fraction-static", "0.8", "--load-format", "dummy", "--host", "127.0.0.1",
        "--port", "30000", "--enable-metrics", "--max-running-requests", "64",
    ]
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "2,3"}


def test_sglang_refuses_unknown_and_managed_flags(sglang_dir: Path) -> None:
    with pytest.raises(ServelabError, match=r"--mem-fraction-statik \(closest: --mem-fraction-static"):
        SglangLauncher().validate(arm(extra_args=["--mem-fraction-statik", "0.7"]), sglang_dir, SGLANG_VERSION)
    # `--tp 2`, as SGLang's docs write it, is argparse's prefix of --tp-size: an arm field.
    with pytest.raises(ServelabError, match="set the arm's `tensor_parallel_size` instead"):
        SglangLauncher().validate(arm(extra_args=["--tp", "2"]), sglang_dir, SGLANG_VERSION)


def test_sglang_across_nodes_one_command_per_rank(sglang_dir: Path, tmp_path: Path) -> None:
    # SGLang's multi-node launch: the same command on every node, TP x PP of the whole
    # replica, each with its rank; a rank above 0 logs beside rank 0, under its own name.
    cmds = {}
    for rank in (0, 1):
        a = arm(tensor_parallel_size=4, pipeline_parallel_size=2, port_base=30000,
                node_rank=NodeRank(nnodes=2, node_rank=rank, dist_init_addr="10.0.0.7:29500"))
        [cmds[rank]] = SglangLauncher().validate(a, sglang_dir, SGLANG_VERSION)
    assert cmds[1].argv[-6:] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.7:29500"]
    assert cmds[0].argv[:-6] == cmds[1].argv[:-6]
    assert cmds[0].argv[cmds[0].argv.index("--tp-size") + 1] == "4"
    assert cmds[0].log_path.name == "a-replica0.log"
    assert cmds[1].log_path.name == "a-replica0-node1.log"
    with pytest.raises(ServelabError, match="set the arm's `node_rank` instead"):
        SglangLauncher().validate(arm(extra_args=["--nnodes", "2"]), sglang_dir, SGLANG_VERSION)
    with pytest.raises(ServelabError, match="does not launch vllm across nodes"):
        VllmLauncher().engine_args(arm(node_rank=NodeRank(nnodes=2, node_rank=1, dist_init_addr="h:1")), 0)
    with pytest.raises(ValueError, match="node_rank 2 must be below nnodes 2"):
        NodeRank(nnodes=2, node_rank=2, dist_init_addr="h:1")
    with pytest.raises(ValueError, match="one replica, not 2"):
        arm(replicas=2, node_rank=NodeRank(nnodes=2, node_rank=0, dist_init_addr="h:1"))


# --- sim command line -------------------------------------------------------------------

def test_sim_command_and_flags(tmp_path: Path) -> None:
    launcher = SimLauncher(gpu="L40S")
    a = arm(model="Qwen/Qwen3-14B", replicas=2, extra_args=["--max-num-seqs", "8", "--time-scale", "4"])
    commands = launcher.validate(a, tmp_path, None)
    assert commands[1].argv == [
        sys.executable, "-m", "servelab.cli.sim_serve", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S",
        "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1", "--gpu-memory-utilization", "0.9",
        "--host", "127.0.0.1", "--port", "8001", "--max-num-seqs", "8", "--time-scale", "4",
    ]
    assert commands[1].env == {}
    with pytest.raises(ServelabError, match=r"--max-num-seqz \(closest: --max-num-seqs"):
        launcher.validate(arm(extra_args=["--max-num-seqz", "8"]), tmp_path, None)
    # the flags were read off `servelab sim serve --help` (as vLLM's off its own), once
    [cached] = tmp_path.glob("servelab-*-sim-serve-help.txt")
    assert {"--max-num-seqs", "--time-scale", "-tp", "--speculative-config"} <= parse_help_options(cached.read_text())


# --- flags ------------------------------------------------------------------------------

def test_help_options_are_what_argparse_defines() -> None:
    parser = argparse.ArgumentParser(prog="x", epilog="  --not-an-option is only mentioned here")
    parser.add_argument("--model", help="wrapped text that\n--port mentions a flag")
    parser.add_argument("-tp", "--tensor-parallel-size", type=int)
    parser.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--load-format", choices=["auto", "dummy"])
    parser.add_argument("--a-very-long-option-name-that-wraps", metavar="A_VERY_LONG_METAVAR_THAT_WRAPS")
    defined = {s for a in parser._actions for s in a.option_strings}
    assert parse_help_options(parser.format_help()) == defined


def test_the_recorded_vllm_help_lists_its_flags() -> None:
    options = parse_help_options(VLLM_HELP.read_text())
    assert {"--model", "--enforce-eager", "-tp", "--no-enable-prefix-caching", "-cc", "-h"} <= options
    assert "--disable-log-requests" not in options
    # A wrapped description line starting with "--port" must not add anything new.
    assert not any(o.endswith(".") or o.endswith(",") for o in options)


@pytest.mark.parametrize(("token", "flag"), [
    ("--max_num_seqs=8", "--max-num-seqs"), ("-cc.mode=none", "-cc"), ("-O3", "-O"),
    ("--compilation-config.mode", "--compilation-config"), ("-1", None), ("-0.5", None),
    ("auto", None), ("--", None),
])
def test_flag_of(token: str, flag: str | None) -> None:
    assert flag_of(token) == flag


def test_flag_names_skip_values() -> None:
    assert flag_names(["--seed", "-1", "--x=1", "--y", "v", "-tp", "2"]) == ["--seed", "--x", "--y", "-tp"]


def test_check_flags_ambiguous_prefix() -> None:
    valid = frozenset({"--max-num-seqs", "--max-model-len"})
    check_flags(["--max-num"], valid, "x")
    with pytest.raises(ServelabError, match=r"--max is ambiguous \(--max-model-len, --max-num-seqs\)"):
        check_flags(["--max"], valid, "x")
    with pytest.raises(ServelabError, match="--max-num"):
        check_flags(["--max-num"], valid, "x", abbrev=False)


def test_cached_help_asks_once(tmp_path: Path) -> None:
    counter = tmp_path / "asked"
    script = (
        "import pathlib, sys; p = pathlib.Path(sys.argv[1]); "
        "p.write_text(str(int(p.read_text() or 0) + 1) if p.exists() else '1'); "
        "print('usage: x\\n\\noptions:\\n  --alpha A   first\\n  --beta      second')"
    )
    argv = [sys.executable, "-c", script, str(counter)]
    cache = tmp_path / "cache" / "eng-1.0-help.txt"
    first = cached_help(cache, argv, {}, 60)
    second = cached_help(cache, argv, {}, 60)
    assert first == second
    assert parse_help_options(first) == {"--alpha", "--beta"}
    assert counter.read_text() == "1"
    assert sorted(p.name for p in cache.parent.iterdir()) == ["eng-1.0-help.txt"]


def test_a_failing_help_command_is_reported(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('ImportError: no module named torch'); sys.exit(1)"]
    with pytest.raises(ServelabError, match="exited with code 1:\nImportError: no module named torch"):
        cached_help(tmp_path / "h.txt", argv, {}, 60)
    assert not (tmp_path / "h.txt").exists()
