"""Reading a spec file so that every value keeps the line it came from.

The YAML text is composed into a node tree once; `LineMap` records the line of every
mapping key and sequence item under its path (``("arms", 1, "args", "max_num_seqs")``), so
a validation error at any path names the line the user must edit. The values themselves
come from PyYAML's safe loader (no tags, no Python objects).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servelab.errors import ServelabError

PathKey = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class LineMap:
    """Line numbers (1-based) of the nodes of one YAML document, by path."""

    lines: dict[PathKey, int]

    def line_of(self, loc: Sequence[str | int]) -> int | None:
        """The line of the deepest node along `loc` that exists in the file.

        Elements of `loc` that name no node (pydantic adds union-member tags such as
        ``"int"`` or a model's name) are skipped, so the answer is the innermost place the
        user wrote something.
        """
        path: PathKey = ()
        line = self.lines.get(path)
        for part in loc:
            candidate = path + (part,)
            if candidate in self.lines:
                path = candidate
                line = self.lines[candidate]
        return line

    def known_path(self, loc: Sequence[str | int]) -> PathKey:
        """The part of `loc` that names nodes in the file (same skipping as `line_of`)."""
        path: PathKey = ()
        for part in loc:
            if path + (part,) in self.lines:
                path = path + (part,)
        return path


def _walk(node: yaml.Node, path: PathKey, lines: dict[PathKey, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            child = path + (key,)
            lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = path + (i,)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines)


def load_yaml(path: Path) -> tuple[Any, LineMap]:
    """The document in `path` and the line of each of its nodes.

    Raises `ServelabError` naming the file and line for unreadable files and YAML syntax
    errors.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ServelabError(f"cannot read spec file {path}: {exc.strerror or exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ServelabError(f"{where}: not valid YAML ({exc.problem or exc.context})") from None
    except yaml.YAMLError as exc:
        raise ServelabError(f"{path}: not valid YAML ({exc})") from None
    lines: dict[PathKey, int] = {}
    if node is not None:
        lines[()] = node.start_mark.line + 1
        _walk(node, (), lines)
    return data, LineMap(lines)
