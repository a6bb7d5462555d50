"""Health, readiness, metrics, the OpenAPI document, request ids, and errors the
server did not expect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import Served, messages
from starlette.testclient import TestClient

from chathistory.server.app import create_app
from chathistory.server.routes import app_routes
from chathistory.stores import MemoryStore, Session


def test_health_and_request_ids(served: Served) -> None:
    with httpx.Client(base_url=served.url) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}
        echoed = client.get("/healthz", headers={"X-Request-ID": "trace-123"})
        assert echoed.headers["x-request-id"] == "trace-123"
        generated = client.get("/healthz").headers["x-request-id"]
        assert len(generated) == 32
        missing = client.get("/v2/nothing")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
        wrong = client.put("/v1/sessions")
        assert wrong.status_code == 405
        assert wrong.json()["error"]["type"] == "method_not_allowed"


class BrokenStore(MemoryStore):
    """A store whose backend fails: unreachable, or a bug."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        raise self.error


def test_readyz_fails_when_the_store_does(tmp_path: Path) -> None:
    app = create_app(BrokenStore(ConnectionRefusedError("db down")), asset_dir=tmp_path,
                     keys_required=True)
    client = TestClient(app)
    assert client.get("/healthz").status_code == 200
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["error"]["type"] == "unavailable"


def test_unexpected_errors_are_500_with_the_request_id_only(tmp_path: Path) -> None:
    store = BrokenStore(RuntimeError("secret internals"))
    app = create_app(store, asset_dir=tmp_path)
    store.error = RuntimeError("secret internals")
    client = TestClient(app, raise_server_exceptions=False, client=("127.0.0.1", 1))
    response = client.get("/v1/sessions/x", headers={"X-Request-ID": "req-9"})
    assert response.status_code == 500
    assert response.json() == {"error": {"type": "internal", "request_id": "req-9",
                                         "message": "internal error; quote request id req-9"}}
    assert "secret" not in response.text


def test_metrics(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("hi")})
    a.get(f"/v1/sessions/{sid}-missing")
    text = httpx.get(served.url + "/metrics").text
    assert ('chathistory_http_requests_total{method="POST",'
            'route="/v1/sessions/{session_id}/messages",status="200"}') in text
    assert 'route="/v1/sessions/{session_id}",status="404"' in text
    assert "chathistory_http_request_duration_seconds_bucket" in text
    assert sid not in text and "tenant" not in text


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_openapi_document(served: Served) -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    doc = httpx.get(served.url + "/openapi.json").json()
    validator.validate(doc)
    assert doc["openapi"].startswith("3.1")
    for route in app_routes():  # ROUTES and the Conversations API's
        operation = doc["paths"][route.path][route.method.lower()]
        assert operation["summary"] and operation["responses"], route.path
    assert sum(len(p) for p in doc["paths"].values()) == len(app_routes())
    schemas = doc["components"]["schemas"]
    for ref in _refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref
    assert {"Message", "Session", "Attachment", "WindowPlan", "AppendBody"} <= set(schemas)
    append = doc["paths"]["/v1/sessions/{session_id}/messages"]["post"]
    body = append["requestBody"]["content"]["application/json"]["schema"]
    assert body["anyOf"][0] == {"$ref": "#/components/schemas/AppendBody"}  # ours first
    assert {"#/components/schemas/OpenAIChatAppendBody", "#/components/schemas/GeminiAppendBody"
            } <= {alternative["$ref"] for alternative in body["anyOf"]}  # ?format= bodies
    assert {"412", "422"} <= set(append["responses"])
