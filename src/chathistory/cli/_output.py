"""Terminal output: rich tables and progress bars on a terminal, plain text
elsewhere (pipes, files, CI) and when rich is not installed.

rich ships with the ``cli`` and ``server`` extras, not with the core library:
``pip install chathistory`` gives a working CLI whose output is plain text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import msgspec

__all__ = ["Column", "Progress", "console_for", "number", "print_json", "print_table"]


def console_for(stream: IO[str]) -> Any | None:
    """A rich ``Console`` on ``stream`` when it is a terminal and rich is installed
    (``CHATHISTORY_PLAIN=1`` forces plain text), else None."""
    if os.environ.get("CHATHISTORY_PLAIN") or not _isatty(stream):
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=stream, highlight=False)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def number(n: float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.1f}"


def print_json(value: Any, stream: IO[str] | None = None) -> None:
    """``value`` as indented JSON (datetimes as RFC 3339)."""
    out = stream or sys.stdout
    out.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")


@dataclass(frozen=True)
class Column:
    header: str
    numeric: bool = False
    wrap: bool = False
    """The flexible column: long cells fold onto several lines."""
    optional: bool = False
    """Left out on a terminal too narrow for every column (the last ones first)."""


_WRAP_MIN = 12
_PADDING = 3  # per column, rich's SIMPLE_HEAD box


def _fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Indices of the columns to show at ``width``: every column not optional,
    optional ones while they fit. Columns other than the wrapping one are never
    cut, so an id can always be copied from the table."""
    natural = [max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    needed = [min(n, _WRAP_MIN) if c.wrap else n for n, c in zip(natural, columns, strict=True)]
    shown = list(range(len(columns)))
    for i in reversed(range(len(columns))):
        if sum(needed[j] + _PADDING for j in shown) <= width:
            break
        if columns[i].optional:
            shown.remove(i)
    return shown


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
                title: str | None = None, caption: str | None = None,
                stream: IO[str] | None = None) -> None:
    """A table fitting the terminal (rich), or aligned plain columns."""
    out = stream or sys.stdout
    console = console_for(out)
    if console is not None:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        shown = _fit(columns, rows, console.width)
        table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, title_justify="left",
                      caption_justify="left")
        for i in shown:
            c = columns[i]
            table.add_column(c.header, justify="right" if c.numeric else "left",
                             overflow="fold" if c.wrap else "ellipsis", no_wrap=not c.wrap,
                             min_width=None if c.wrap else len(max(
                                 [c.header, *(r[i] for r in rows)], key=len)),
                             ratio=1 if c.wrap else None)
        for row in rows:
            table.add_row(*(Text(row[i]) for i in shown))  # Text: no markup in user data
        console.print(table)
        return
    if title:
        out.write(title + "\n")
    widths = [max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = [[c.header for c in columns], *rows]
    for row in lines:
        cells = [cell.rjust(w) if c.numeric else cell.ljust(w)
                 for cell, c, w in zip(row, columns, widths, strict=True)]
        out.write("  ".join(cells).rstrip() + "\n")
    if caption:
        out.write(caption + "\n")


class Progress:
    """A progress bar on stderr when it is a terminal (and rich is installed);
    otherwise nothing is shown."""

    def __init__(self, description: str, stream: IO[str] | None = None) -> None:
        self.description = description
        self.stream = stream or sys.stderr
        self._bar: Any = None
        self._task: Any = None

    @contextmanager
    def shown(self) -> Iterator[Progress]:
        console = console_for(self.stream)
        if console is None:
            yield self
            return
        from rich.progress import (
            BarColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                           TaskProgressColumn(), TextColumn("{task.fields[note]}"),
                           TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                           console=console)
        with bar:
            self._bar = bar
            self._task = bar.add_task(self.description, total=None, note="")
            try:
                yield self
            finally:
                self._bar = None

    def update(self, completed: float, total: float | None, note: str = "") -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, total=total, note=note)

    def finish(self) -> None:
        """Show the work as done (a file cut short ends before its last byte)."""
        if self._bar is not None:
            task = self._bar.tasks[0]
            total = task.total or task.completed or 1
            self._bar.update(self._task, completed=total, total=total)
