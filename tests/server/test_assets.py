"""Uploads: streamed to disk, content-addressed per tenant, capped at 50 MB."""

from __future__ import annotations

import hashlib
import http.client
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serverkit import Served

from chathistory import Message
from chathistory.assets import FileAssetStore

MB = 1024 * 1024


def tenant_files(served: Served, tenant: str) -> list[Path]:
    root = FileAssetStore(served.asset_dir)._dir(tenant)
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_upload_sniffs_and_dedups(served_sqlite: Served, png_bytes: bytes) -> None:
    served = served_sqlite
    with served.client("A") as a:
        first = a.post("/v1/assets", params={"name": "red.png"}, content=png_bytes)
        assert first.status_code == 201
        att = first.json()
        assert att["sha256"] == hashlib.sha256(png_bytes).hexdigest()
        assert (att["mime_type"], att["modality"], att["size"]) == ("image/png", "image",
                                                                  len(png_bytes))
        assert (att["width"], att["height"]) == (4, 3) and "data" not in att
        files = tenant_files(served, "A")
        second = a.post("/v1/assets", content=png_bytes,
                        headers={"Content-Type": "application/octet-stream"})
        assert second.json()["sha256"] == att["sha256"]
        assert tenant_files(served, "A") == files  # stored once
        down = a.get(f"/v1/assets/{att['sha256']}")
        assert down.content == png_bytes and down.headers["content-type"] == "image/png"
        # two sessions reference the uploaded file: no bytes travel again
        for _ in range(2):
            sid = served.new_session(a)
            ref = Message.user("see", ).to_dict()
            ref["parts"].append({"type": "image", "attachment": att})
            assert a.post(f"/v1/sessions/{sid}/messages",
                          json={"messages": [ref]}).status_code == 200
            stored = a.get(f"/v1/sessions/{sid}/messages", params={"tail": 1}).json()
            assert stored["messages"][0]["parts"][1]["attachment"]["sha256"] == att["sha256"]
        assert tenant_files(served, "A") == files
        pytest.importorskip("chathistory.formats.openai_chat")
        chat = a.get(f"/v1/sessions/{sid}/messages",
                     params={"tail": 1, "format": "openai_chat"}).json()
        assert chat["messages"][0]["content"][1]["image_url"]["url"].startswith(
            "data:image/png;base64,")


def test_upload_over_the_cap_keeps_nothing(served_sqlite: Served) -> None:
    served = served_sqlite
    before = tenant_files(served, "B")

    def body() -> Iterator[bytes]:  # chunked: no Content-Length to refuse early
        chunk = b"\0" * MB
        for _ in range(51):
            yield chunk

    with served.client("B") as b:
        streamed = b.post("/v1/assets", content=body(),
                          headers={"Content-Type": "application/octet-stream"})
        assert streamed.status_code == 413
        assert streamed.json()["error"]["type"] == "payload_too_large"
        # a declared length over the cap is refused before a byte of the body is read
        connection = http.client.HTTPConnection("127.0.0.1", served.server.port, timeout=10)
        connection.putrequest("POST", "/v1/assets")
        connection.putheader("Authorization", f"Bearer {served.keys['B']}")
        connection.putheader("Content-Length", str(51 * MB))
        connection.endheaders()
        declared = connection.getresponse()
        assert declared.status == 413
        connection.close()
        assert tenant_files(served, "B") == before
        assert not list(served.asset_dir.rglob(".upload-*"))
        assert b.get("/healthz").status_code == 200


def test_upload_errors(served_sqlite: Served, png_bytes: bytes) -> None:
    with served_sqlite.client("A") as a:
        evil = a.post("/v1/assets", params={"mime_type": "application/x-evil"}, content=b"x")
        assert evil.status_code == 415
        declared = a.post("/v1/assets", content=b"\x00\x01",
                          headers={"Content-Type": "application/x-msdownload"})
        assert declared.status_code == 415
        assert a.post("/v1/assets", content=b"").status_code == 422
        assert a.get("/v1/assets/" + "0" * 64).status_code == 404
        assert a.get("/v1/assets/../../etc/passwd").status_code == 404
        assert a.get("/v1/assets/NOTHEX").status_code == 404
    with httpx.Client(base_url=served_sqlite.url) as anonymous:
        assert anonymous.post("/v1/assets", content=png_bytes).status_code == 401


def test_file_asset_store_directly(tmp_path: Path, png_bytes: bytes) -> None:
    store = FileAssetStore(tmp_path, max_bytes=100)
    att = store.put("t", png_bytes[:90], name="x.bin", mime_type="application/octet-stream")
    assert store.get("t", att.sha256) == png_bytes[:90]
    assert store.info("other", att.sha256) is None
    paths = [p.relative_to(tmp_path).parts for p in tmp_path.rglob("*") if p.is_file()]
    assert all("t" not in parts and "x.bin" not in parts for parts in paths)
    with pytest.raises(ValueError):
        store.put("t", b"y" * 101)
    assert store.delete("t", att.sha256) and store.info("t", att.sha256) is None
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []


def test_a_file_gone_before_its_download_starts_is_a_json_500(
        served_sqlite: Served, png_bytes: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file response fails before it starts (its file went away after the route
    found it): the client gets the JSON 500 with its request id, as for any error,
    not a bare one from the HTTP server."""
    with served_sqlite.client("A") as a:
        sha = a.post("/v1/assets", content=png_bytes,
                     headers={"Content-Type": "application/octet-stream"}).json()["sha256"]
        monkeypatch.setattr(FileAssetStore, "path",
                            lambda self, tenant, sha256: served_sqlite.asset_dir / "gone")
        down = a.get(f"/v1/assets/{sha}", headers={"X-Request-ID": "gone-1"})
    assert down.status_code == 500
    assert down.headers["x-request-id"] == "gone-1"
    assert down.json()["error"] == {"type": "internal",
                                    "message": "internal error; quote request id gone-1",
                                    "request_id": "gone-1"}
