"""Reliability harness for chathistory: crash safety, concurrency, soak, fuzz, isolation.

Run from the repository root: `python -m reliability [--quick] [--only NAME ...]`.
See docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# Test the working tree even when chathistory is not installed.
if importlib.util.find_spec("chathistory") is None:
    _src = Path(__file__).resolve().parent.parent / "src"
    if (_src / "chathistory").is_dir():
        sys.path.insert(0, str(_src))
