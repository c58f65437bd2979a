"""A text table that never drops a digit, whatever the console's width.

rich shrinks a table that is wider than the console by cutting cells to `…`, so a figure
such as 1,564.2 can read `1,564…`. `FitTable` instead chooses its layout at render time
from the width it is given:
1. one grid, each column as wide as its widest cell (headers wrap at their spaces and
   text cells at theirs, numbers never);
2. when that is too wide, column groups: the identity columns (`keys`, e.g. load and arm)
   repeated in front of as many of the other columns as fit, one grid per group, titled
   "(1/2)", "(2/2)";
3. when not even the identity columns and one more fit, stacked rows: each row as its
   identity line and one `header: value` line per figure.
Shared by the report, `plan` and `sweep`, so every table a command prints behaves alike.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

_NUMBER = re.compile(r"^[x~+-]?\d[\d,]*(\.\d+)?( ?(%|x|ms|s))?$")
_GAP = 2  # columns between cells: one space of padding and the (blank) divider


def _is_figure(cell: str) -> bool:
    """A cell that must stay on one line: a number, or "a / b" pairs of numbers."""
    parts = [p.strip() for p in cell.split("/")]
    return all(p == "-" or _NUMBER.match(p) for p in parts) and any(p != "-" for p in parts)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _height(text: str, width: int) -> int:
    """Lines `text` takes wrapped at its spaces to `width` columns."""
    return max(1, len(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)))


@dataclass(frozen=True, slots=True)
class FitTable:
    """A table of text cells that fits the console it is printed to (see the module doc).

    `keys`: how many leading columns identify a row (repeated in every column group);
    `note`: a line printed after the table.
    """

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    keys: int = 1
    note: str = ""

    def _figure_columns(self) -> list[bool]:
        """Columns whose every non-empty cell is a figure: right-aligned, never wrapped."""
        cols = list(zip(*self.rows)) if self.rows else [()] * len(self.headers)
        return [bool(c) and all(_is_figure(v) or v in ("", "-") for v in c)
                and any(_is_figure(v) for v in c) for c in cols]

    def _widths(self, figure: list[bool]) -> tuple[list[int], list[int]]:
        """(narrowest, natural) width of each column: the narrowest wraps headers and text
        at spaces and keeps each figure whole; the natural keeps every cell on one line."""
        low, natural = [], []
        for i, header in enumerate(self.headers):
            cells = [r[i] for r in self.rows]
            natural.append(max([len(header), *(len(c) for c in cells)]))
            low.append(max([_longest_word(header), 1,
                            *((len(c) if figure[i] else _longest_word(c)) for c in cells)]))
        return low, natural

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        figure = self._figure_columns()
        low, natural = self._widths(figure)
        n = len(self.headers)
        keys = list(range(min(self.keys, n)))

        def need(cols: Sequence[int]) -> int:
            return sum(low[i] for i in cols) + _GAP * (len(cols) - 1)

        groups = self._groups(keys, n, need, width)
        if not groups:
            yield from self._stacked()
        for g, cols in enumerate(groups):
            part = f" ({g + 1}/{len(groups)})" if len(groups) > 1 else ""
            yield Text(self.title + part, style="bold")
            yield self._grid(cols, figure, low, natural, width)
        if self.note:
            yield Text(self.note, style="dim")

    @staticmethod
    def _groups(keys: list[int], n: int, need: Callable[[Sequence[int]], int],
                width: int) -> list[list[int]]:
        """The column groups that fit `width` (each led by the keys); [] to stack rows."""
        if need(range(n)) <= width:
            return [list(range(n))]
        rest = list(range(len(keys), n))
        if any(need([*keys, i]) > width for i in rest):
            return []  # even one figure beside the keys is too wide
        greedy: list[list[int]] = [[]]
        for i in rest:
            if greedy[-1] and need([*keys, *greedy[-1], i]) > width:
                greedy.append([])
            greedy[-1].append(i)
        # As many groups as the greedy packing needs, but even in size when they fit so
        # (7 + 1 columns reads worse than 4 + 4).
        size = math.ceil(len(rest) / len(greedy))
        even = [rest[k:k + size] for k in range(0, len(rest), size)]
        chosen = even if all(need([*keys, *g]) <= width for g in even) else greedy
        return [[*keys, *g] for g in chosen]

    def _grid(self, cols: list[int], figure: list[bool], low: list[int], natural: list[int],
              width: int) -> Table:
        # Fixed widths: rich never shrinks a fixed column, and the sum fits by construction.
        widths = {i: low[i] for i in cols}
        spare = width - sum(widths.values()) - _GAP * (len(cols) - 1)
        # Spare columns go one at a time to the tallest column (its header or a text cell
        # wrapped on most lines) that can still widen, so headers end up evenly short.
        cells = {i: [self.headers[i], *(r[i] for r in self.rows)] for i in cols}
        while spare > 0:
            growable = [i for i in cols if widths[i] < natural[i]]
            if not growable:
                break
            tallest = max(growable, key=lambda i: max(_height(c, widths[i]) for c in cells[i]))
            widths[tallest] += 1
            spare -= 1
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                      header_style="bold")
        for i in cols:
            # No no_wrap: it would cut the header too; a figure fits its width by construction.
            table.add_column(Text(self.headers[i]), width=widths[i],
                             justify="right" if figure[i] else "left", overflow="fold")
        for row in self.rows:
            # Text, not str: an arm named "awq[4bit]" is not rich markup.
            table.add_row(*(Text(row[i]) for i in cols))
        return table

    def _stacked(self) -> RenderResult:
        yield Text(self.title, style="bold")
        for row in self.rows:
            yield Text(" ".join(row[: self.keys]), style="bold")
            for header, cell in zip(self.headers[self.keys:], row[self.keys:]):
                yield Text(f"  {header}: {cell}")
