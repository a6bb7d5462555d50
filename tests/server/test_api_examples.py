"""docs/api.md's shell examples run as written, in document order, against a live
server: every ```bash block is run by bash (the real ``curl`` and ``chathistory``
binaries) in one working directory, and the output block right after it (```http
for ``curl -i``, ```text otherwise) must match what it printed.

What "match" means, so that the page may abbreviate:
- http: the status line is equal; each header shown is sent with that value; the
  body follows the JSON rules below (JSON lines: the lines shown are found in order
  among the real ones; a body that is not JSON: equal).
- JSON: every key shown is there with a matching value; keys not shown are not
  checked. ``"..."`` stands for any value; a string ending in ``...`` for any string
  starting with what comes before it; a list must have the same length, unless its
  last item is ``"..."``: then the items shown are found in order among the real ones.
- text: line by line; ``<a placeholder>`` stands for any text.

The page's blocks share a shell the way a terminal does: what one block exports
(``export KEY=...``), the next ones see. Its base URL (``http://127.0.0.1:8000``)
is replaced by the test server's; its store (``sqlite:///chat.db``) is the test
server's SQLite file in the working directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from examplekit import WILDCARD, in_order, json_mismatches
from serverkit import IN_CI, LiveServer

from chathistory.server.app import create_app
from chathistory.stores import open_store

DOC = Path(__file__).parent.parent.parent / "docs" / "api.md"
DOC_URL = "http://127.0.0.1:8000"
SHELL_STATE = ".shell-state"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
_OUTPUTS = ("http", "text")


@dataclass(frozen=True)
class Example:
    """A ```bash block of the page and the output block after it (None: no output)."""

    line: int
    command: str
    language: str | None
    expected: str | None

    @property
    def name(self) -> str:
        first = self.command.strip().splitlines()[0]
        return f"line {self.line}: {first[:60]}"


def examples(text: str) -> list[Example]:
    """The page's ```bash blocks, each with the ```http or ```text block that follows
    it directly (only blank lines between)."""
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]
    found: list[Example] = []
    for i, (language, body, start, end) in enumerate(blocks):
        if language != "bash":
            continue
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        output = None
        if after is not None and after[0] in _OUTPUTS and not text[end:after[2]].strip():
            output = after
        found.append(Example(text.count("\n", 0, start) + 1, body,
                             output[0] if output else None, output[1] if output else None))
    return found


# ---------------------------------------------------------------- matching


def _values(text: str) -> list[Any] | None:
    """The JSON value of ``text``, or its JSON lines, or None when it is neither."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        return None


def body_mismatches(shown: str, real: str) -> list[str]:
    shown, real = shown.strip(), real.strip()
    shown_values = _values(shown) if shown else []
    if shown_values is None:
        return [] if shown == real else [f"body: {real!r}, the page shows {shown!r}"]
    real_values = _values(real) if real else []
    if real_values is None:
        return [f"body is not JSON: {real[:300]!r}"]
    if len(shown_values) == 1 and len(real_values) == 1:
        return json_mismatches(shown_values[0], real_values[0])
    return in_order(shown_values, real_values, "$lines")  # JSON lines: those shown, in order


@dataclass(frozen=True)
class Response:
    status: str
    headers: list[tuple[str, str]]
    body: str


def responses(output: bytes) -> list[Response]:
    """``curl -i`` output: its responses one after another (each body as long as its
    ``Content-Length`` says; without one, the rest)."""
    found = []
    while output.strip():
        head, _, rest = output.partition(b"\r\n\r\n")
        status, *lines = head.decode("latin-1").strip().split("\r\n")
        headers = [(name.strip().lower(), value.strip())
                   for name, _, value in (line.partition(":") for line in lines)]
        length = next((int(v) for n, v in headers if n == "content-length"), len(rest))
        found.append(Response(status, headers, rest[:length].decode()))
        output = rest[length:]
    return found


def shown_responses(text: str) -> list[Response]:
    """The page's ```http block: responses, each from its status line, headers, a blank
    line and the body."""
    parts = re.split(r"^(?=HTTP/)", text, flags=re.M)
    found = []
    for part in (p for p in parts if p.strip()):
        head, _, body = part.partition("\n\n")
        status, *lines = head.strip().splitlines()
        headers = [(name.strip().lower(), value.strip())
                   for name, _, value in (line.partition(":") for line in lines)]
        found.append(Response(status, headers, body))
    return found


def http_mismatches(shown: str, real: bytes) -> list[str]:
    """``curl -i`` output against the page's ```http block."""
    expected, got = shown_responses(shown), responses(real)
    if len(expected) != len(got):
        return [f"{len(got)} responses printed, the page shows {len(expected)}"]
    out = []
    for number, (page, sent) in enumerate(zip(expected, got, strict=True), 1):
        where = f"response {number}: " if len(got) > 1 else ""
        if page.status != sent.status:
            out.append(f"{where}status {sent.status!r}, the page shows {page.status!r}")
        headers = dict(sent.headers)
        for name, value in page.headers:
            if name not in headers:
                out.append(f"{where}header {name} not sent")
            elif value != WILDCARD and headers[name] != value:
                out.append(f"{where}header {name}: {headers[name]!r}, the page shows {value!r}")
        out += [where + m for m in body_mismatches(page.body, sent.body)]
    return out


def text_mismatches(shown: str, real: bytes) -> list[str]:
    shown_lines, real_lines = shown.strip().splitlines(), real.decode().strip().splitlines()
    if len(shown_lines) != len(real_lines):
        return [f"{len(real_lines)} lines printed, the page shows {len(shown_lines)}"]
    out = []
    for shown_line, real_line in zip(shown_lines, real_lines, strict=True):
        pattern = ".+".join(re.escape(part) for part in re.split(r"<[^<>]+>", shown_line))
        if re.fullmatch(pattern, real_line) is None:
            out.append(f"{real_line!r}, the page shows {shown_line!r}")
    return out


# ---------------------------------------------------------------- running


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: bytes
    stderr: str


class Walkthrough:
    """The page's examples run in order in one directory, each at most once: running
    example ``i`` runs the ones before it first (whatever they print: their own test
    cases check them), so any selection of test cases sees the state the page does."""

    def __init__(self, folder: Path, url: str, items: list[Example]) -> None:
        self.folder, self.url, self.items = folder, url, items
        self.ran: list[Ran] = []
        bin_dir = str(Path(sys.executable).parent)
        self.env = {name: value for name, value in os.environ.items()
                    if not name.lower().endswith("_proxy")}  # loopback, never a proxy
        self.env.update(PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
                        HOME=str(folder))  # no ~/.curlrc of the machine's user
        self.env.pop("CHATHISTORY_STORE", None)
        self.env.pop("CHATHISTORY_API_KEY", None)

    def run(self, index: int) -> Ran:
        while len(self.ran) <= index:
            self.ran.append(self._run(self.items[len(self.ran)]))
        return self.ran[index]

    def _run(self, example: Example) -> Ran:
        command = example.command.replace(DOC_URL, self.url)
        script = (f"[ -f {SHELL_STATE} ] && . ./{SHELL_STATE}\n"
                  f"trap 'export -p > {SHELL_STATE}' EXIT\n"
                  f"set -e -o pipefail\n{command}")
        done = subprocess.run(["bash", "-c", script], cwd=self.folder, env=self.env,
                              capture_output=True, timeout=60)
        return Ran(done.returncode, done.stdout, done.stderr.decode(errors="replace"))


ALL = examples(DOC.read_text())


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walkthrough]:
    for tool in ("curl", "bash"):
        if shutil.which(tool) is None:
            message = f"{tool} is not installed: docs/api.md's examples need it"
            if IN_CI:
                pytest.fail(message + " (CI=true: .ci/run must install it)")
            pytest.skip(message)
    folder = tmp_path_factory.mktemp("api-examples")
    # the store `chathistory serve --store sqlite:///chat.db` opens, with its defaults
    store = open_store(f"sqlite:///{folder / 'chat.db'}")
    server = LiveServer(create_app(store, asset_dir=folder / "chathistory-assets",
                                   key_cache_seconds=0.2)).start()
    try:
        yield Walkthrough(folder, server.url, ALL)
    finally:
        server.stop()
        store.close()




def test_the_page_has_examples_of_every_route_family() -> None:
    commands = "\n".join(example.command for example in ALL)
    for needle in ("chathistory keys create", "/v1/me", "/v1/sessions", "/messages?tail=",
                   "max_tokens=", "/window", "/fork", "/edit", "/lineage", "/v1/assets",
                   "/v1/export", "/v1/import", "-X PATCH", "-X DELETE"):
        assert needle in commands, f"docs/api.md has no example with {needle}"
    for example in ALL:
        if "curl" in example.command:
            assert example.language is not None, f"{example.name}: no output shown after it"


@pytest.mark.parametrize("index", range(len(ALL)), ids=[e.name for e in ALL])
def test_example_runs_as_shown(walkthrough: Walkthrough, index: int) -> None:
    example = ALL[index]
    ran = walkthrough.run(index)
    assert ran.returncode == 0, f"{example.name} exited {ran.returncode}: {ran.stderr}"
    if example.expected is None:
        assert not ran.stdout.strip(), f"{example.name} printed {ran.stdout!r}, none shown"
        return
    compare = http_mismatches if example.language == "http" else text_mismatches
    problems = compare(example.expected, ran.stdout)
    assert not problems, (f"docs/api.md {example.name} printed:\n{ran.stdout.decode()}\n"
                          + "\n".join(problems))
