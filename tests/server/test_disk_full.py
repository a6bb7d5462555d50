"""A full disk (issue 43, item 12): every write the API takes answers 507
``storage_full`` with ``Retry-After``, never a 500, and keeps nothing of itself; the
same writes succeed once there is room again. Against ``chathistory serve`` with its
store, its asset directory and its temporary files on a real, small file system
(a tmpfs, as ``reliability/hostile.py``'s disk-full attack mounts one). Mounting
needs root; without it the test is skipped with the reason, and fails under CI."""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from serverkit import serve_process

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the repository root: the reliability harness
    sys.path.insert(0, str(ROOT))
hostile = importlib.import_module("reliability.hostile")
procs = importlib.import_module("reliability.procs")

IN_CI = os.environ.get("CI", "").lower() == "true"


def need_mount() -> None:
    why = hostile.can_mount()
    if why is not None:
        if IN_CI:
            pytest.fail(f"{why} (CI=true: the disk-full tests must run)")
        pytest.skip(why)


@pytest.fixture(scope="module")
def disk() -> Iterator[Path]:
    """A 16 MB tmpfs of this module's own."""
    need_mount()
    with hostile.mounted("tmpfs", 16) as point:
        yield point


@pytest.fixture(scope="module")
def server(disk: Path) -> Iterator[str]:
    """``chathistory serve`` over SQLite on ``disk``, its assets and its temporary
    files (TMPDIR: an import's spool) there too; open mode (no keys), loopback."""
    port = procs.free_port()
    env = {**procs.child_env(), "TMPDIR": str(disk / "tmp")}
    (disk / "tmp").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "chathistory", "serve", "--store", f"sqlite:///{disk}/full.db",
         "--asset-dir", str(disk / "assets"), "--port", str(port), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=procs.die_with_parent)
    url = f"http://127.0.0.1:{port}"
    try:
        procs.wait_until(lambda: httpx.get(url + "/readyz", timeout=2).status_code == 200,
                         "chathistory serve", 60, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def full(disk: Path) -> Iterator[None]:
    """``disk`` filled to its last byte by a file of its own, removed after."""
    filler = disk / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    try:
        yield
    finally:
        filler.unlink()


def refused(response: httpx.Response, what: str) -> None:
    assert response.status_code == 507, (what, response.status_code, response.text[:300])
    body = response.json()["error"]
    assert body["type"] == "storage_full", (what, body)
    assert response.headers.get("retry-after"), (what, response.headers)


def until_full(write: Callable[[], httpx.Response], stored: int, what: str) -> None:
    """``write()`` again while it answers ``stored`` (at most 400 times), until it is
    refused, with a 507."""
    for _ in range(400):
        response = write()
        if response.status_code != stored:
            refused(response, what)
            return
    pytest.fail(f"400 of {what} were all stored")


def leftovers(disk: Path) -> list[Path]:
    """Temporary files of uploads and imports."""
    return [p for p in [*(disk / "assets").rglob(".*"), *(disk / "tmp").rglob("*")]
            if p.is_file()]


def import_body() -> bytes:
    """An import past the 8 MiB an import keeps in memory (the rest is spooled to a
    temporary file)."""
    lines = [json.dumps({"kind": "session", "session": {
        "id": f"imported-{uuid.uuid4().hex}", "tenant": "default",
        "metadata": {"pad": "y" * 100_000}}}) for _ in range(90)]
    return "\n".join(lines).encode()


def test_every_write_on_a_full_disk_is_a_507(disk: Path, server: str) -> None:
    with httpx.Client(base_url=server, timeout=60) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        big = "x" * 200_000
        # an import whose last line is bad (nothing stored) spools to TMPDIR once, so
        # the server's temporary directory is TMPDIR (tempfile.gettempdir() passes over
        # a directory it cannot write a file in, which a full disk is)
        bad = c.post("/v1/import", content=import_body() + b"\n{",
                     headers={"Content-Type": "application/x-ndjson"})
        assert bad.status_code in (400, 422), bad.text
        with full(disk):
            refused(c.post("/v1/assets", content=os.urandom(300_000),
                           headers={"Content-Type": "application/octet-stream"}), "upload")
            seen: list[int] = []  # SQLite may still have room in pages it holds: go on
            for _ in range(40):  # until the disk takes no more
                response = c.post("/v1/sessions", json={"metadata": {"big": big}})
                seen.append(response.status_code)
                if response.status_code != 201:
                    refused(response, "session create")
                    break
            assert seen[-1] == 507, seen
            for _ in range(40):
                response = c.patch(f"/v1/sessions/{sid}", json={"state": {"big": big}})
                if response.status_code != 200:
                    refused(response, "session update")
                    break
            else:
                pytest.fail("40 updates of 200 KB on a full disk were all stored")
            imported = c.post("/v1/import", content=import_body(),
                              headers={"Content-Type": "application/x-ndjson"})
            refused(imported, "import")
            assert "TMPDIR" in imported.json()["error"]["message"]  # refused as it spooled
            refused(c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
                {"role": "user", "parts": [{"type": "text", "text": big}]}]}), "append")
            assert c.get("/healthz").status_code == 200
            assert c.get(f"/v1/sessions/{sid}").status_code == 200  # reads go on
        assert leftovers(disk) == []  # nothing of the refused uploads and imports
        # room again: the same writes are taken
        upload = c.post("/v1/assets", content=os.urandom(300_000),
                        headers={"Content-Type": "application/octet-stream"})
        assert upload.status_code == 201, upload.text
        assert c.post("/v1/sessions", json={}).status_code == 201
        assert c.patch(f"/v1/sessions/{sid}", json={"state": {"ok": 1}}).status_code == 200


@pytest.fixture(scope="module")
def postgres_on_small_disk() -> Iterator[str]:
    """A PostgreSQL cluster of its own whose database keeps its tables in a tablespace
    on a 16 MB tmpfs (its WAL stays on the machine's disk)."""
    need_mount()
    try:
        pg = hostile.PrivatePostgres()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        if IN_CI:
            pytest.fail(f"no private PostgreSQL: {exc} (CI=true: the test must run)")
        pytest.skip(f"no private PostgreSQL: {exc}")
    import psycopg

    with hostile.mounted("tmpfs", 16) as point:
        try:
            point.parent.chmod(0o755)  # (mkdtemp's directory: root's only)
            subprocess.run(["chown", "postgres:postgres", str(point)], check=True)
            pg.start()
            with psycopg.connect(pg.url, autocommit=True) as conn:
                conn.execute(f"CREATE TABLESPACE small LOCATION '{point}'")
                conn.execute("ALTER DATABASE postgres SET default_tablespace = small")
            yield pg.url
        finally:
            pg.stop()  # before the file system goes


def test_every_write_on_postgresql_s_full_disk_is_a_507(postgres_on_small_disk: str,
                                                        tmp_path: Path) -> None:
    """PostgreSQL's "could not extend file ... No space left on device" (SQLSTATE
    53100) is a 507 as SQLite's full disk is, for a session's creation and update and
    an append."""
    with (serve_process("--store", postgres_on_small_disk, "--asset-dir",
                        str(tmp_path / "assets")) as url,
          httpx.Client(base_url=url, timeout=60) as c):
        sid = c.post("/v1/sessions", json={}).json()["id"]
        seen: list[int] = []
        for _ in range(400):  # 100 KB that do not compress, until the tablespace is full
            response = c.post("/v1/sessions", json={"metadata": {"pad": os.urandom(
                50_000).hex()}})
            seen.append(response.status_code)
            if response.status_code != 201:
                refused(response, "session create")
                break
        assert seen[-1] == 507, seen[-5:]
        refused(c.patch(f"/v1/sessions/{sid}", json={"state": {"pad": os.urandom(
            200_000).hex()}}), "session update")
        refused(c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            {"role": "user", "parts": [{"type": "text", "text": os.urandom(200_000).hex()}]}
        ]}), "append")
        assert c.get(f"/v1/sessions/{sid}").status_code == 200  # reads go on
        assert c.get("/healthz").status_code == 200


REDIS_FULL = {
    "its AOF on a full disk": ("--appendonly", "yes", "--appendfsync", "everysec"),
    "at maxmemory": ("--maxmemory", "4mb", "--maxmemory-policy", "noeviction"),
}


@pytest.mark.parametrize("how", list(REDIS_FULL))
def test_every_write_to_a_full_redis_is_a_507(how: str, tmp_path: Path) -> None:
    """A private redis-server with its files on an 8 MB tmpfs, writing its AOF there
    (MISCONF ... No space left on device), or held to 4 MB of memory (OOM command not
    allowed): session creates until it is full, then a create and an append are each
    507 with Retry-After, reads go on."""
    if how == "its AOF on a full disk":
        need_mount()
    try:
        procs.RedisServer(tmp_path, "--version")
    except RuntimeError as exc:
        if IN_CI:
            pytest.fail(f"{exc} (CI=true: the test must run)")
        pytest.skip(str(exc))
    with contextlib.ExitStack() as stack:
        where = (stack.enter_context(hostile.mounted("tmpfs", 8))
                 if how == "its AOF on a full disk" else tmp_path)
        redis = procs.RedisServer(where / "redis", *REDIS_FULL[how]).start()
        stack.callback(redis.stop)
        url = stack.enter_context(serve_process("--store", redis.url, "--asset-dir",
                                                str(tmp_path / "assets")))
        c = stack.enter_context(httpx.Client(base_url=url, timeout=60))
        sid = c.post("/v1/sessions", json={}).json()["id"]
        # (at maxmemory, a write fits again once a large request's buffer is freed:
        # each kind of write goes on until it is refused)
        until_full(lambda: c.post("/v1/sessions", json={"metadata": {"pad": os.urandom(
            50_000).hex()}}), 201, "session create")
        until_full(lambda: c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            {"role": "user", "parts": [{"type": "text", "text": os.urandom(50_000).hex()}]}
        ]}), 200, "append")
        assert c.get(f"/v1/sessions/{sid}").status_code == 200  # reads go on
