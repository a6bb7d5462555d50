"""What every reliability check returns, and small helpers the checks share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Result:
    """One row of the reliability table: a check run against one target.

    `tried` counts the attempts (kills, writes, cases), `ok` the ones that held,
    `failed` the ones that did not. `detail` is one short line for the table.
    """

    check: str
    target: str
    tried: int
    ok: int
    failed: int
    seconds: float
    detail: str = ""
    informational: bool = False
    """A measurement, not a check (e.g. what Redis `appendfsync everysec` loses):
    printed with verdict `info`, never a failure."""

    @property
    def passed(self) -> bool:
        return self.failed == 0 and self.tried > 0
