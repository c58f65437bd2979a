"""Traffic: request specs, datasets, tokenizers, arrival schedules and inspection.

Public API: `load_tokenizer` (tokenizer), `DatasetOptions`, `build_workload`, `Workload`
(datasets), `ArrivalOptions`, `arrival_times_s`, `schedule_s` (arrivals). See docs/workloads.md.
"""

from servelab.workload.arrivals import (
    ArrivalOptions,
    arrival_times_s,
    schedule_s,
)
from servelab.workload.datasets import DatasetOptions, Workload, build_workload
from servelab.workload.request import ChatMessage, RequestSpec
from servelab.workload.tokenizer import TokenizerHandle, TokenizerInfo, load_tokenizer

__all__ = [
    "ArrivalOptions",
    "ChatMessage",
    "DatasetOptions",
    "RequestSpec",
    "TokenizerHandle",
    "TokenizerInfo",
    "Workload",
    "arrival_times_s",
    "build_workload",
    "load_tokenizer",
    "schedule_s",
]
