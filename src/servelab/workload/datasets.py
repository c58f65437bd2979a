"""Building a workload: dataset options in, a seeded list of `RequestSpec`s out.

One entry point, `build_workload`, dispatches to the dataset modules (sharegpt, synthetic,
jsonl). Everything random draws from generators seeded with the run's seed, so the same
options, tokenizer and seed give the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servelab.errors import ServelabError
from servelab.workload import jsonl, sharegpt, synthetic
from servelab.workload.request import RequestSpec
from servelab.workload.tokenizer import TokenizerHandle, TokenizerInfo

DatasetName = Literal["sharegpt", "prefix_repetition", "random", "jsonl"]
DATASET_NAMES: tuple[str, ...] = ("sharegpt", "prefix_repetition", "random", "jsonl")


class DatasetOptions(BaseModel):
    """What traffic to build. Field names are vLLM's flag names (`--random-input-len`...).

    Lengths are in tokens of the chosen tokenizer. Defaults follow `vllm bench serve`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset_name: DatasetName = "sharegpt"
    dataset_path: Path | None = None
    num_prompts: int = Field(1000, ge=1)
    sharegpt_output_len: int | None = Field(None, ge=1)
    sharegpt_pairing: Literal["vllm", "human-first"] = "vllm"
    prefix_repetition_prefix_len: int = Field(256, ge=0)
    prefix_repetition_suffix_len: int = Field(256, ge=1)
    prefix_repetition_num_prefixes: int = Field(10, ge=1)
    prefix_repetition_output_len: int = Field(128, ge=1)
    random_input_len: int = Field(1024, ge=0)
    random_output_len: int = Field(128, ge=1)
    random_range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    random_prefix_len: int = Field(0, ge=0)
    jsonl_output_len: int = Field(256, ge=1)
    tokenizer: str | None = None
    use_chat: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> DatasetOptions:
        if self.dataset_name == "jsonl" and self.dataset_path is None:
            raise ValueError("--dataset-name jsonl needs --dataset-path FILE.jsonl")
        if self.dataset_name in ("random", "prefix_repetition") and self.dataset_path is not None:
            raise ValueError(f"--dataset-path is not used by --dataset-name {self.dataset_name}")
        if (
            self.dataset_name == "prefix_repetition"
            and self.prefix_repetition_num_prefixes > self.num_prompts
        ):
            raise ValueError(
                f"--prefix-repetition-num-prefixes {self.prefix_repetition_num_prefixes} "
                f"exceeds --num-prompts {self.num_prompts}"
            )
        return self


@dataclass(slots=True)
class Workload:
    """The requests of one run and how they were made.

    `notes` tell what a reader must know about the data (a truncated file, fewer requests
    than asked for); `seed` is the seed the requests were drawn with.
    """

    requests: list[RequestSpec]
    tokenizer: TokenizerInfo
    dataset_name: str
    seed: int
    notes: list[str] = field(default_factory=list)


def build_workload(opts: DatasetOptions, tokenizer: TokenizerHandle, seed: int) -> Workload:
    """Build the workload `opts` describes, counting tokens with `tokenizer`, seeded by `seed`."""
    notes: list[str] = []
    name = opts.dataset_name
    if name == "sharegpt":
        path = opts.dataset_path if opts.dataset_path is not None else sharegpt.packaged_sharegpt_path()
        data = sharegpt.read_sharegpt(path, opts.sharegpt_pairing)
        notes.extend(data.notes())
        requests = sharegpt.sample_sharegpt(
            data, tokenizer, num_prompts=opts.num_prompts, output_len=opts.sharegpt_output_len,
            use_chat=opts.use_chat, seed=seed,
        )
    elif name == "jsonl":
        assert opts.dataset_path is not None  # checked by DatasetOptions
        requests, more = jsonl.read_jsonl(
            opts.dataset_path, tokenizer, num_prompts=opts.num_prompts,
            default_output_len=opts.jsonl_output_len, use_chat=opts.use_chat,
        )
        notes.extend(more)
    elif name == "random":
        requests = synthetic.random_requests(opts, tokenizer, np.random.default_rng(seed))
    elif name == "prefix_repetition":
        requests = synthetic.prefix_repetition_requests(
            opts, tokenizer, np.random.default_rng(seed)
        )
    else:  # unreachable: DatasetOptions only admits the names above
        raise ServelabError(f"--dataset-name {name}: unknown dataset")
    return Workload(requests, tokenizer.info, name, seed, notes)
