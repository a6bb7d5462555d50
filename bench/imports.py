"""`python -m bench.imports [MB ...] [--bomb MB] [--timeout S] [IMPORT OPTIONS]`: time
and peak memory of `chathistory import` on a ChatGPT export whose one conversation
holds one large text (10, 20 and 40 MB by default), and on a small zip holding one conversation of
``--bomb`` MB (600 by default). Each import runs in a process of its own (peak RSS is
its ``VmHWM``) into a fresh SQLite store; prints one line a file."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path


def export_with_text(size: int) -> bytes:
    """A ChatGPT export of one conversation: a short prompt and an answer of ``size``
    bytes of text (words, so that no tokenizer's worst case is measured)."""
    text = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    node = {"id": "n-a", "parent": "n-u", "children": [], "message": {
        "id": "n-a", "author": {"role": "assistant"}, "recipient": "all",
        "content": {"content_type": "text", "parts": [text]}, "metadata": {}}}
    prompt = {"id": "n-u", "parent": None, "children": ["n-a"], "message": {
        "id": "n-u", "author": {"role": "user"}, "recipient": "all",
        "content": {"content_type": "text", "parts": ["write a lot"]}, "metadata": {}}}
    record = {"title": "big", "conversation_id": "big-1", "current_node": "n-a",
              "mapping": {"n-u": prompt, "n-a": node}}
    return json.dumps([record]).encode()


def run_import(path: Path, store: Path, timeout: float, extra: list[str],
               memory: bool = False) -> str:
    started = time.perf_counter()
    child = _CHILD_MEMORY if memory else _CHILD
    command = [sys.executable, "-c", child, str(path), f"sqlite:///{store}", *extra]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout:.0f} s"
    elapsed = time.perf_counter() - started
    cpu, peak = (done.stdout.strip().splitlines()[-1].split() if done.stdout.strip()
                 else ("nan", "?"))
    outcome = "ok" if done.returncode == 0 else (
        f"exit {done.returncode}: " + (done.stderr.strip().splitlines() or ["?"])[-1][:160])
    return f"{elapsed:6.1f} s ({float(cpu):.1f} s CPU), peak RSS {peak} MB, {outcome}"


# With --memory: the import alone, into a MemoryStore counting tokens by the approximate
# counter (no tokenizer to load, no database): what reading and converting cost.
_CHILD_MEMORY = """
import re, resource, sys
from chathistory.importers import import_file
from chathistory.stores import MemoryStore
options = dict(a.split("=", 1) for a in sys.argv[3:])
import_file(MemoryStore(counter="approx"), sys.argv[1],
            **{k: int(v) for k, v in options.items()})
status = open("/proc/self/status").read()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, int(re.search(r"VmHWM:\\s*(\\d+)", status).group(1)) // 1024)
"""

# The child's peak is VmHWM: ru_maxrss would start from this process's size at the fork.
_CHILD = """
import re, resource, sys
from chathistory.cli import main
code = main(["import", "--json", sys.argv[1], "--store", sys.argv[2], *sys.argv[3:]])
status = open("/proc/self/status").read()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, int(re.search(r"VmHWM:\\s*(\\d+)", status).group(1)) // 1024)
sys.exit(code)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.imports", description=__doc__)
    parser.add_argument("sizes", nargs="*", type=int, default=[10, 20, 40],
                        help="MB of text in the one conversation")
    parser.add_argument("--bomb", type=int, default=600, help="MB of text in the zip (0: none)")
    parser.add_argument("--timeout", type=float, default=400.0)
    parser.add_argument("--memory", action="store_true",
                        help="import_file into a MemoryStore with the approximate counter "
                        "(the rest of the options: NAME=INT keyword arguments of import_file)")
    args, extra = parser.parse_known_args(argv)  # the rest: options of chathistory import
    memory: bool = args.memory
    print(f"python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tiny = root / "tiny.json"
        tiny.write_bytes(export_with_text(100))
        fixed = run_import(tiny, root / "tiny.db", args.timeout, extra, memory)
        print(f"100 B record (the fixed cost): {fixed}", flush=True)
        for mb in args.sizes:
            path = root / f"text{mb}.json"
            path.write_bytes(export_with_text(mb * 1_000_000))
            result = run_import(path, root / f"s{mb}.db", args.timeout, extra, memory)
            print(f"{mb} MB record: {result}", flush=True)
            path.unlink()
        if args.bomb:
            bomb = root / "bomb.zip"
            with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
                z.writestr("conversations.json", export_with_text(args.bomb * 1_000_000))
            print(f"zip of {bomb.stat().st_size // 1000:,} KB holding a {args.bomb} MB record: "
                  f"{run_import(bomb, root / 'bomb.db', args.timeout, extra, memory)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
