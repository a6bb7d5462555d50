"""Benchmarks for chathistory, side by side with peer libraries.

Run from the repository root: `python -m bench` (all suites) or
`python -m bench foundation`. See bench/README.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# Benchmark the working tree even when chathistory is not installed.
if importlib.util.find_spec("chathistory") is None:
    _src = Path(__file__).resolve().parent.parent / "src"
    if (_src / "chathistory").is_dir():
        sys.path.insert(0, str(_src))
