"""Engine adapters: command lines, flag checks, startup-log parsing, health, stop by PID.

The contract (`ArmLaunch`, `EngineLauncher`, `RunningEngine`) is in `servelab.engine.adapter`;
one launcher per engine kind: `VllmLauncher`, `SglangLauncher`, `SimLauncher`,
`ExternalLauncher`.
"""

from servelab.engine.adapter import ArmLaunch, EngineLauncher, NodeRank, RunningEngine
from servelab.engine.external import ExternalLauncher
from servelab.engine.logparse import (
    LogFact,
    StartupInfo,
    StartupLogParser,
    clean_line,
    parse_line,
    parse_startup_log,
)
from servelab.engine.sglang import SglangLauncher, SglangRuntime
from servelab.engine.sim import SimLauncher
from servelab.engine.vllm import VllmLauncher, VllmRuntime

__all__ = [
    "ArmLaunch",
    "EngineLauncher",
    "ExternalLauncher",
    "LogFact",
    "NodeRank",
    "RunningEngine",
    "SglangLauncher",
    "SglangRuntime",
    "SimLauncher",
    "StartupInfo",
    "StartupLogParser",
    "VllmLauncher",
    "VllmRuntime",
    "clean_line",
    "parse_line",
    "parse_startup_log",
]
