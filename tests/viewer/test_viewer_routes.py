"""The viewer's files as the server serves them: without a key, with a strict
Content Security Policy, cacheable by ETag, and nothing else under /viewer."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from serverkit import keyed_page_client as client
from starlette.testclient import TestClient

from chathistory.server.app import create_app
from chathistory.stores import MemoryStore


def test_page_and_files_are_served_without_a_key(tmp_path: Path) -> None:
    http = client(tmp_path)
    page = http.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/viewer/app.js">' in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    for name, media in [("app.js", "text/javascript"), ("markdown.js", "text/javascript"),
                        ("markdown-it.min.js", "text/javascript"),
                        ("style.css", "text/css"), ("favicon.svg", "image/svg+xml")]:
        response = http.get(f"/viewer/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith(media)
        assert response.headers["x-content-type-options"] == "nosniff"
    assert http.get("/v1/sessions").status_code == 401  # the data still needs a key


# npm's markdown-it@15.0.3 (tarball sha1 2a69a26db9abb63340512bfde0c4f4ae6db671eb, as
# `npm view markdown-it@15.0.3 dist.shasum` says), dist/browser/markdown-it.esm.min.mjs
MARKDOWN_IT_SHA256 = "d5432491790141da046b1197353705db03264f40b5727f3b4b591f5aba193e30"


def test_vendored_markdown_it_is_the_release_beside_its_license() -> None:
    """The vendored parser is the published file byte for byte (an update
    changes this hash and docs/viewer.md together), and its license ships with it."""
    folder = resources.files("chathistory.server").joinpath("viewer")
    script = folder.joinpath("markdown-it.min.js").read_bytes()
    assert hashlib.sha256(script).hexdigest() == MARKDOWN_IT_SHA256
    assert script.startswith(b"/*! markdown-it 15.0.3 ") and b"@license MIT" in script[:100]
    license_text = folder.joinpath("markdown-it.LICENSE").read_text()
    assert "Copyright (c) 2014 Vitaly Puzrin, Alex Kocharin." in license_text
    assert "Permission is hereby granted, free of charge" in license_text


def test_etag_and_unknown_files(tmp_path: Path) -> None:
    http = client(tmp_path)
    first = http.get("/viewer/app.js")
    again = http.get("/viewer/app.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    for path in ("/viewer/nope.js", "/viewer/..%2Fviewer.py", "/viewer/viewer.py",
                 "/viewer/%2e%2e%2fapp.py"):
        assert http.get(path).status_code == 404, path
    assert http.get("/favicon.ico", follow_redirects=False).headers["location"] == \
        "/viewer/favicon.svg"


def test_asset_downloads_run_nothing(tmp_path: Path) -> None:
    """An uploaded HTML file opened from this origin must not run script
    against the viewer (which holds the key)."""
    store = MemoryStore(counter="approx")
    from chathistory.server import auth

    _, secret = auth.create_key(store, "t")
    http = TestClient(create_app(store, asset_dir=tmp_path / "assets"))
    headers = {"Authorization": f"Bearer {secret}"}
    html = b"<html><script>alert(document.domain)</script></html>"
    uploaded = http.post("/v1/assets?name=x.html&mime_type=text/html", content=html,
                         headers=headers)
    assert uploaded.status_code == 201, uploaded.text
    got = http.get(f"/v1/assets/{uploaded.json()['sha256']}", headers=headers)
    assert got.content == html
    assert "sandbox" in got.headers["content-security-policy"]
    assert got.headers["x-content-type-options"] == "nosniff"
