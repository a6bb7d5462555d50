"""``/docs``: the interactive API page's files as the server serves them (without a
key, under a strict Content Security Policy, cacheable by ETag, nothing else under
/docs), and the vendored Swagger UI is npm's release beside its licences. (The
page working in a browser: tests/viewer/test_apidocs_page.py.)"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path

from serverkit import keyed_page_client as client


def test_page_and_files_are_served_without_a_key(tmp_path: Path) -> None:
    http = client(tmp_path)
    page = http.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="/docs/swagger-ui-bundle.js" defer></script>' in page.text
    assert '<script src="/docs/init.js" defer></script>' in page.text
    assert "<script>" not in page.text  # nothing inline: the policy would refuse it
    csp = page.headers["content-security-policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "style-src 'self'",
                      "connect-src 'self'", "frame-ancestors 'none'"):
        assert directive in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    for name, media in [("init.js", "text/javascript"), ("swagger-ui-bundle.js", "text/javascript"),
                        ("swagger-ui.css", "text/css")]:
        response = http.get(f"/docs/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith(media)
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-security-policy"] == csp
    assert http.head("/docs").status_code == 200
    assert http.get("/v1/me").status_code == 401  # the API still needs a key


def test_etag_and_nothing_else_under_docs(tmp_path: Path) -> None:
    http = client(tmp_path)
    first = http.get("/docs/swagger-ui-bundle.js")
    again = http.get("/docs/swagger-ui-bundle.js",
                     headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    for path in ("/docs/swagger-ui.LICENSE", "/docs/nope.js", "/docs/..%2Fapidocs.py",
                 "/docs/%2e%2e%2fapp.py", "/docs/apidocs.py", "/docs/index.html/x"):
        assert http.get(path).status_code == 404, path


def test_the_page_asks_nothing_of_another_origin() -> None:
    """Offline by construction: no URL of another site in the page or its start-up
    script, the document read from this server, and no validator service."""
    folder = resources.files("chathistory.server").joinpath("apidocs")
    page = folder.joinpath("index.html").read_text()
    init = folder.joinpath("init.js").read_text()
    assert re.search(r"(https?:)?//", page.replace("<!doctype", "")) is None
    assert re.search(r"https?://", init) is None
    assert 'url: "/openapi.json"' in init and "validatorUrl: null" in init


# npm's swagger-ui-dist@5.35.0 (tarball sha1 5c3b487ae5a2121b2c668d6f92b550707521876a, as
# `npm view swagger-ui-dist@5.35.0 dist.shasum` says): its swagger-ui-bundle.js and
# swagger-ui.css, unchanged
VENDORED_SHA256 = {
    "swagger-ui-bundle.js": "e6a898692f2d768e807c3ba4626068a69a2c5dd960dd6c76f3e4d3a3de180af2",
    "swagger-ui.css": "5ed08757e53da3e026d6cbecc61fe5d43585c9560b302d534ad56692519a273d",
}


def test_vendored_swagger_ui_is_the_release_beside_its_licences() -> None:
    """An update changes these hashes, the version in apidocs.py and docs/api.md
    together; the Apache-2.0 licence, its NOTICE and the bundle's third-party notices
    ship with it."""
    folder = resources.files("chathistory.server").joinpath("apidocs")
    for name, digest in VENDORED_SHA256.items():
        assert hashlib.sha256(folder.joinpath(name).read_bytes()).hexdigest() == digest, name
    licence = folder.joinpath("swagger-ui.LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "SmartBear Software" in folder.joinpath("swagger-ui.NOTICE").read_text()
    bundle_head = folder.joinpath("swagger-ui-bundle.js").read_bytes()[:100]
    assert b"swagger-ui-bundle.js.LICENSE.txt" in bundle_head
    assert "MIT" in folder.joinpath("swagger-ui-bundle.js.LICENSE.txt").read_text()
