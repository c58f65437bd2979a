"""Engine adapters: command lines, flag checks, startup-log parsing, health, stop by PID."""

from servelab.engine.logparse import (
    LogFact,
    StartupInfo,
    StartupLogParser,
    clean_line,
    parse_line,
    parse_startup_log,
)

__all__ = [
    "LogFact",
    "StartupInfo",
    "StartupLogParser",
    "clean_line",
    "parse_line",
    "parse_startup_log",
]
