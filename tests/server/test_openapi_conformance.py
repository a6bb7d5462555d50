"""The OpenAPI document against a live server, by schemathesis (every check, every
phase: examples, coverage, fuzzing, stateful): a schema-valid request is served, a
schema-violating one refused, every answer is one the document declares. A bounded,
seeded run (``MAX_EXAMPLES`` an operation) on SQLite; the refusals a schema cannot
foresee are named one by one in ``schemathesis_hooks``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from serverkit import serve

MAX_EXAMPLES = 10
SEED = 43
HERE = Path(__file__).parent


def _config(path: Path, secret: str) -> None:
    """Both schemes the document declares carry the same key (sent together with two
    different keys they are refused); a 412 (If-Match behind the session's version) is
    an answer to a valid request, as a 409 is."""
    path.write_text(f"""
[auth.openapi.bearer]
bearer = "{secret}"
[auth.openapi.apiKey]
api_key = "{secret}"
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "412", "429"]
[[operations]]
include-path = "/v1/import"
enabled = false
""")


def test_the_document_says_what_the_server_does(tmp_path: Path) -> None:
    served = serve("sqlite", tmp_path)
    try:
        config = tmp_path / "schemathesis.toml"
        _config(config, served.keys["A"])
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
               "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
             f"{served.url}/openapi.json", "--checks", "all", "--max-examples",
             str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1", "--no-shrink",
             "--request-timeout", "30"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    finally:
        served.server.stop()
    summary = run.stdout[-12000:] + run.stderr[-3000:]
    assert run.returncode == 0, summary
    tested = re.search(r"Tested:\s+(\d+)", run.stdout)
    assert tested is not None and int(tested.group(1)) >= 30, summary  # every operation
