"""Seeded data for the viewer's browser tests (and for a look by hand:
``python tests/viewer/seed.py DIR`` serves it on http://127.0.0.1:8765 and prints
the keys).

Two tenants: ``acme`` with sessions showing every kind of part (markdown, code,
tables, an image, a file, tool calls with results, a failed tool call,
reasoning, a summary, a planned context window, a fork) and an XSS attempt;
``rival`` with one session that ``acme``'s key must never show.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from chathistory import Attachment, Message
from chathistory.model import KVStatus
from chathistory.server import auth
from chathistory.stores.sqlite import SQLiteStore

XSS_TEXT = (
    'Try these: <img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script> '
    "and [a link](javascript:window.__xss=3) and <a href=\"javascript:window.__xss=4\">x</a>\n\n"
    "```html\n<script>window.__xss=5</script>\n```\n"
    "![pic](javascript:window.__xss=6) <svg onload=\"window.__xss=7\"></svg>"
)

MARKDOWN_TEXT = """# Sorting in Python

Use **`sorted()`** for a *new* list, or `list.sort()` in place. ~~Never~~ rarely write your own.

1. Pass `key=` for a custom order
2. Pass `reverse=True` to flip it
   - nested points work too

```python
def top(items, n=3):
    return sorted(items, key=len, reverse=True)[:n]
```

| method | returns | stable |
|---|:---:|---:|
| sorted() | new list | yes |
| list.sort() | None | yes |

> Docs: https://docs.python.org/3/howto/sorting.html
"""


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG of one colour."""
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


@dataclass
class Seeded:
    keys: dict[str, str]
    image_sha256: str
    summary_of: list[str]


def seed_store(store: SQLiteStore) -> Seeded:
    """Keys and sessions written straight to the store (the window comes later,
    over HTTP, because the service plans it)."""
    keys = {tenant: auth.create_key(store, tenant, "viewer test")[1]
            for tenant in ("acme", "rival")}
    t = "acme"

    store.create_session("markdown", tenant=t, metadata={"title": "Sorting in Python",
                                                         "topic": "python"})
    base = [Message.system("You are a concise Python tutor."),
            Message.user("How do I sort a list of words by length?", name="ana"),
            Message.assistant(MARKDOWN_TEXT)]
    store.append("markdown", base, tenant=t)
    store.fork("markdown", base[1].id, tenant=t, new_session_id="markdown-alt")
    store.append("markdown-alt", [Message.assistant("Use `sorted(words, key=len)`. Done.")],
                 tenant=t)

    store.create_session("tools", tenant=t, metadata={"title": "Weather with tools",
                                                      "topic": "weather"})
    store.append("tools", [
        Message.user("What's the weather in Paris and in Atlantis?"),
        Message.assistant("", [{"id": "call_paris", "name": "get_weather",
                                "arguments": {"city": "Paris", "unit": "celsius"}},
                               {"id": "call_atlantis", "name": "get_weather",
                                "arguments": {"city": "Atlantis"}}],
                          reasoning="The user wants two cities; call the tool twice."),
        Message.tool_result("call_paris", '{"temperature": 21, "sky": "clear"}',
                            name="get_weather"),
        Message.tool_result("call_atlantis", "city not found: Atlantis", is_error=True,
                            name="get_weather"),
        Message.assistant("Paris: 21 °C and clear. I could not find Atlantis."),
    ], tenant=t)

    image = png(48, 32, (59, 91, 219))
    store.create_session("image", tenant=t, metadata={"title": "A picture and a file"})
    store.append("image", [
        Message.user("What colour is this? Notes attached.",
                     Attachment.from_bytes(image, name="square.png"),
                     Attachment.from_bytes(b"colour notes: blue\n", name="notes.txt",
                                           mime_type="text/plain")),
        Message.assistant("It is a blue rectangle, 48 by 32 pixels."),
    ], tenant=t)

    store.create_session("xss", tenant=t, metadata={"title": "Hostile content"})
    store.append("xss", [Message.user(XSS_TEXT), Message.assistant(XSS_TEXT)], tenant=t)

    store.create_session("long", tenant=t, metadata={"title": "A long chat with a window"})
    turns: list[Message] = [Message.system("Be brief.")]
    for i in range(40):
        turns.append(Message.user(f"Question {i}: what is {i} squared? " + "words " * 20))
        turns.append(Message.assistant(f"Answer {i}: {i * i}. " + "more words " * 15))
    store.append("long", turns, tenant=t)
    replaced = [m.id for m in turns[1:9]]
    store.mark("long", replaced, KVStatus.MARKED, tenant=t)
    store.append("long", [Message.user(
        "Summary: questions 0 to 3 asked for squares; they were answered.",
        metadata={"chathistory": {"summary_of": replaced}})], tenant=t)

    store.create_session("secret", tenant="rival", metadata={"title": "Rival plans"})
    store.append("secret", [Message.user("rival secret: launch on friday")], tenant="rival")
    return Seeded(keys, hashlib.sha256(image).hexdigest(), replaced)


def wait_until(page: Any, predicate: str, arg: Any = None, timeout: int = 10_000) -> None:
    """Poll ``predicate`` (a JS function) until it is truthy. (Playwright's
    wait_for_function polls with eval, which the viewer's CSP forbids.)"""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(predicate, arg):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} ms: {predicate}")
        page.wait_for_timeout(50)


def plan_window(url: str, key: str) -> None:
    """Two turns of the service's context window on ``long`` (the second reuses
    the first one's prefix)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
        for _ in range(2):
            response = client.post("/v1/sessions/long/window", json={"max_tokens": 1200})
            response.raise_for_status()


def main() -> None:  # pragma: no cover - a manual aid
    import uvicorn

    from chathistory.server.app import create_app

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "viewer-demo")
    folder.mkdir(exist_ok=True)
    store = SQLiteStore(folder / "demo.db", counter="o200k_base")
    seeded = seed_store(store)
    print("keys:", seeded.keys)
    app = create_app(store, asset_dir=folder / "assets")
    import threading
    import time

    threading.Thread(target=lambda: (time.sleep(1.5),
                                     plan_window("http://127.0.0.1:8765", seeded.keys["acme"])),
                     daemon=True).start()
    uvicorn.run(app, host="127.0.0.1", port=8765, log_level="warning")


if __name__ == "__main__":
    main()
