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
    timing_only: bool = False
    """The row failed on time bounds only, each missed by less than `GENEROUS` times
    (`over_time`): the harness fails it, a test does not (tests/reliability run on
    machines at load 10-12, where a bound of this machine is missed by its speed)."""

    @property
    def held(self) -> bool:
        """A test's verdict: passed, or failed on time bounds only (`timing_only`)."""
        return self.passed or (self.timing_only and self.tried > 0)

    @property
    def passed(self) -> bool:
        return self.failed == 0 and self.tried > 0


GENEROUS = 20
"""How many times a time bound a measurement may take before it is a fault even in a
test (a request held up behind another tenant's work, a hang), not the speed of a
loaded machine: 2 cores at load 12 ran this harness's requests 5-10 times slower."""


def over_time(what: str, seconds: float, limit: float, problems: list[str],
              late: list[str]) -> None:
    """Judge a time against the harness's ``limit``: over it, ``late`` (the harness
    fails the row, a test reports it); over ``GENEROUS`` times it, a fault in
    ``problems`` (a test fails too)."""
    if seconds > GENEROUS * limit:
        problems.append(f"{what} {seconds * 1000:.0f} ms > {GENEROUS} x {limit * 1000:.0f} ms")
    elif seconds > limit:
        late.append(f"{what} {seconds * 1000:.0f} ms > {limit * 1000:.0f} ms")
