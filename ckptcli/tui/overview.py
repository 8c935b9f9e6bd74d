"""The overview strip of a timeline: the whole run on one line, as a minimap. Each cell
stands for an equal share of the rows (events); its height is how fast the events of
that share came (events per second, on a log scale: a burst is tall, an idle stretch
low), red where it holds an error, a magenta `┃` where a checkpoint was taken, and the
cursor's cell reversed. A click moves the cursor to the first row of that cell.

Cost: the heights need the time of the events at the cells' boundaries only (one event
read per cell, kept until the rows or the width change); errors and checkpoints come
from the timeline's jump index (each cell a binary search), drawn once it exists.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widget import Widget

__all__ = ["BARS", "OverviewStrip", "bucket_rows", "rate_bars"]

#: The heights of a cell, slowest to fastest.
BARS = "▁▂▃▄▅▆▇█"


def bucket_rows(rows: int, width: int) -> list[int]:
    """The first row of each of `width` cells over rows 1..rows-1 (row 0, the snapshot,
    belongs to the first cell), and the end (`rows`) last: width + 1 boundaries, fewer
    cells when there are fewer events than cells."""
    events_ = max(0, rows - 1)
    cells = max(1, min(width, events_))
    return [1 + (events_ * i) // cells for i in range(cells)] + [rows]


def rate_bars(bounds: Sequence[int], times: Sequence[int | None]) -> str:
    """One bar per cell: events per second between the cell's boundary times (`times[i]`
    the time, ns, of row bounds[i]; None when unknown), log-scaled between the slowest
    and the fastest cell."""
    rates: list[float | None] = []
    last = bounds[-1] - 1  # the last row: the end boundary's time is its
    for i in range(len(bounds) - 1):
        a, b = times[i], times[i + 1]
        n = min(bounds[i + 1], last) - bounds[i]  # the intervals between the two times
        if a is None or b is None or n <= 0:
            rates.append(rates[-1] if rates else None)  # a cell of one event at the end: as its neighbour
            continue
        rates.append(n / max((b - a) / 1e9, 1e-6))
    known = [math.log10(r) for r in rates if r is not None and r > 0]
    lo, hi = (min(known), max(known)) if known else (0.0, 0.0)
    out = []
    for r in rates:
        if r is None or r <= 0:
            out.append(BARS[0])
        elif hi - lo < 1e-9:
            out.append(BARS[len(BARS) // 2])
        else:
            out.append(BARS[round((math.log10(r) - lo) / (hi - lo) * (len(BARS) - 1))])
    return "".join(out)


def _any_in(rows: Sequence[int], start: int, end: int) -> bool:
    i = bisect_left(rows, start)
    return i < len(rows) and rows[i] < end


class OverviewStrip(Widget):
    """The run on one line (see the module's docstring). The screen gives it the row
    count, the time of a row, the rows of errors and checkpoints and the cursor."""

    DEFAULT_CSS = """
    OverviewStrip { height: 1; background: $boost; color: $text-muted; }
    """

    @dataclass
    class Jump(Message):
        """A click on the strip: move the cursor to `row`."""

        row: int

    def __init__(self, time_of: Callable[[int], int | None], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.time_of = time_of
        self.rows = 1
        self.cursor = 0
        self.errors: Sequence[int] = ()
        self.checkpoints: Sequence[int] = ()
        self._bars: tuple[int, int, list[int], str] | None = None  # (rows, width, bounds, bars)
        self.active = False  # drawn once the screen's first frame is out (its reads wait for it)

    def activate(self) -> None:
        self.active = True
        self.refresh()

    def update_run(self, rows: int, cursor: int, errors: Sequence[int] | None = None, checkpoints: Sequence[int] | None = None) -> None:
        """The rows (changed when a followed run grows), the cursor, and (once the jump
        index exists) the rows of errors and of checkpoints, each in increasing order."""
        self.rows, self.cursor = rows, cursor
        if errors is not None:
            self.errors = errors
        if checkpoints is not None:
            self.checkpoints = checkpoints
        self.refresh()

    def move_cursor(self, cursor: int) -> None:
        """The cursor moved: the strip is drawn again only when it moved to another cell
        (a cell holds many rows: on a long run a PageDown stays in its cell)."""
        if cursor != self.cursor:
            before, self.cursor = self.cursor, cursor
            cell = self._cell(cursor)
            if cell is None or cell != self._cell(before):
                self.refresh()

    def _cell(self, row: int) -> int | None:
        """The cell holding `row` as last drawn; None before the strip was laid out."""
        got = self._bars
        if got is None or got[0] != self.rows:
            return None  # not drawn for these rows yet: any move draws it
        bounds = got[2]
        return min(max(bisect_right(bounds, row) - 1, 0), len(bounds) - 2)

    def _layout(self, width: int) -> tuple[list[int], str]:
        got = self._bars
        if got is not None and got[0] == self.rows and got[1] == width:
            return got[2], got[3]
        bounds = bucket_rows(self.rows, width)
        times = [self.time_of(min(r, self.rows - 1)) for r in bounds]
        bars = rate_bars(bounds, times)
        self._bars = (self.rows, width, bounds, bars)
        return bounds, bars

    def render(self) -> Text:
        width = self.size.width
        if not self.active:
            return Text("")
        if self.rows <= 1 or width <= 0:
            return Text("no events", style="dim italic")
        bounds, bars = self._layout(width)
        text = Text(no_wrap=True, overflow="crop")
        for i, bar in enumerate(bars):
            start, end = bounds[i] if i else 0, bounds[i + 1]
            glyph, style = bar, "cyan"
            if _any_in(self.checkpoints, start, end):
                glyph, style = "┃", "bold magenta"
            if _any_in(self.errors, start, end):
                style = "bold red"
            if start <= self.cursor < end:
                style += " reverse"
            text.append(glyph, style=style)
        return text

    def cell_row(self, x: int) -> int | None:
        """The first row of the cell at column x."""
        if self.rows <= 1 or self._bars is None:
            return None
        bounds = self._bars[2]
        if not 0 <= x < len(bounds) - 1:
            return None
        return bounds[x] if x else 0

    def on_click(self, event: events.Click) -> None:
        row = self.cell_row(event.x)
        if row is not None:
            self.post_message(self.Jump(row))
