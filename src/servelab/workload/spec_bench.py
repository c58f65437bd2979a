"""Spec-Bench (github.com/hemingkx/Spec-Bench, data/spec_bench/question.jsonl) from a local file.

Each line holds `question_id`, `category` and `turns` (a list of strings); as vLLM's
SpecBench loader does, a request is the first turn, `--spec-bench-category` keeps one
category, and sampling is then the custom dataset's (shuffle, take, oversample) with
`--spec-bench-output-len` tokens out. vLLM shuffles Spec-Bench with seed 0 whatever
`--seed` says (its loader is not handed the seed); servelab uses the run's seed.
"""

from __future__ import annotations

from pathlib import Path

from servelab.errors import ServelabError
from servelab.workload.custom import PromptLine
from servelab.workload.filelines import json_lines, require_file


def read_spec_bench(path: Path, category: str | None) -> tuple[list[PromptLine], list[str]]:
    """The first turn of every question (of `category`, when given), in file order, and
    the categories the file holds (for the error when none matches)."""
    require_file(path, "spec_bench")
    out: list[PromptLine] = []
    seen: list[str] = []
    for lineno, obj in json_lines(path):
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise ServelabError(
                f"{path}:{lineno}: 'turns' must be a non-empty list of strings "
                f"(keys found: {', '.join(sorted(obj)) or 'none'})"
            )
        cat = obj.get("category")
        if cat is not None and not isinstance(cat, str):
            raise ServelabError(f"{path}:{lineno}: 'category' must be a string")
        if cat is not None and cat not in seen:
            seen.append(cat)
        if category is None or cat == category:
            out.append(PromptLine(turns[0], None, lineno))
    if not out:
        if category is not None:
            raise ServelabError(
                f"--spec-bench-category {category}: no question of that category in {path} "
                f"(categories: {', '.join(seen) or 'none'})"
            )
        raise ServelabError(f"{path}: no questions (the file has no non-blank lines)")
    return out, seen
