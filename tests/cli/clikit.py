"""What the CLI tests share besides fixtures: the fixture files' directory and the
result of one in-process run (``Result``, ``Run``). A module of its own (not conftest)
so that a test imports it by a name no other test directory's conftest shadows."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Run = Callable[..., Result]
