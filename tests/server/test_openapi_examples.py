"""The OpenAPI document's examples (``server/examples.py``) are what the API does:
each request is valid input, each answer a valid output, and sent in order to a
live server each request gets the example's status and fields."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from examplekit import WILDCARD, json_mismatches
from serverkit import LiveServer

from chathistory.server import auth
from chathistory.server.app import create_app
from chathistory.server.examples import EXAMPLES, Example, for_operation
from chathistory.server.openapi import document
from chathistory.server.routes import ROUTES
from chathistory.server.routes_messages import INPUT_FORMATS
from chathistory.server.schema import ErrorBody
from chathistory.stores import open_store

VOLATILE = {"created_at", "updated_at", "at", "request_id", "key_id"}
"""Fields a server makes anew for every request (times, ids of requests and keys)."""
_ROUTES = {(route.method, route.path): route for route in ROUTES}


def _loose(value: Any, varies: set[str], path: str = "$") -> Any:
    """``value`` with the fields that differ from run to run as wildcards: those named
    in ``VOLATILE`` anywhere, and the paths in ``varies``."""
    if path in varies:
        return WILDCARD
    if isinstance(value, dict):
        return {k: WILDCARD if k in VOLATILE else _loose(v, varies, f"{path}.{k}")
                for k, v in value.items()}
    if isinstance(value, list):
        return [_loose(v, varies, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _request(client: httpx.Client, example: Example) -> httpx.Response:
    names = set(re.findall(r"\{(\w+)\}", example.path))
    path = example.path.format(**{k: v for k, v in example.params.items() if k in names})
    query = {k: v for k, v in example.params.items() if k not in names and k != "If-Match"}
    headers = {"If-Match": example.params["If-Match"]} if "If-Match" in example.params else {}
    if example.media_type is not None:
        headers["Content-Type"] = example.media_type
        return client.request(example.method, path, params=query, headers=headers,
                              content=example.body)
    return client.request(example.method, path, params=query, headers=headers,
                          json=example.body)


def test_every_operation_has_an_example_and_every_example_an_operation() -> None:
    for example in EXAMPLES:
        assert (example.method, example.path) in _ROUTES, example.summary
    missing = [f"{method} {path}" for method, path in _ROUTES
               if not any(e.method == method and e.path == path for e in EXAMPLES)]
    assert not missing, f"operations without an example in server/examples.py: {missing}"
    names = [(e.method, e.path, e.name) for e in EXAMPLES]
    assert len(names) == len(set(names)), "two examples of one operation share a name"
    for method, path in _ROUTES:  # its parameters are what "Try it out" starts with
        assert for_operation(method, path)[0].status < 400, f"{method} {path}"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.method} {e.path} {e.name}")
def test_examples_are_valid_input_and_output(example: Example) -> None:
    """Each JSON body decodes as the route's body struct, each JSON answer as its
    response type (msgspec, strict: what the server itself would accept)."""
    route = _ROUTES[(example.method, example.path)]
    if example.media_type is None and example.body is not None and example.status < 400:
        body = route.body  # (an error's example may be bad input)
        if isinstance(body, tuple):  # an append: its ?format= says which
            fmt = example.params.get("format")
            body = INPUT_FORMATS[fmt][0] if fmt else body[0]
        msgspec.convert(example.body, body)
    if example.media_type is not None:
        assert route.body in (example.media_type, "application/octet-stream")
    kind = route.responses.get(example.status, ErrorBody)
    if isinstance(kind, tuple):  # a read: in a provider's shape with ?format=
        kind = kind[-1] if example.params.get("format") else kind[0]
    if not isinstance(kind, str) and kind is not None:
        msgspec.convert(example.response, kind, strict=False)
    for name in example.params:
        assert f"{{{name}}}" in route.path or (name == "If-Match" and route.if_match) \
            or name in {p.name for p in route.query}, (example.summary, name)


def _check_against_schema(doc: dict[str, Any], media: dict[str, Any], value: Any) -> None:
    """``value`` is valid by the document's own JSON Schema of ``media``."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {**media["schema"], "components": doc["components"]}  # its $refs resolve here
    jsonschema.Draft202012Validator(schema).validate(value)


def test_examples_are_in_the_document_and_valid_by_its_schemas() -> None:
    doc = document(ROUTES)
    for example in EXAMPLES:
        operation = doc["paths"][example.path][example.method.lower()]
        answer = operation["responses"][str(example.status)]
        if example.response is not None:
            (media_type, media), = answer["content"].items()
            assert media["examples"][example.name]["value"] == example.response
            if media_type == "application/json":
                _check_against_schema(doc, media, example.response)
        if example.body is not None:
            (media_type, media), = operation["requestBody"]["content"].items()
            assert media["examples"][example.name]["value"] == example.body
            if media_type == "application/json" and example.status < 400:
                _check_against_schema(doc, media, example.body)
    append = doc["paths"]["/v1/sessions/{session_id}/messages"]["post"]
    params = {p["name"]: p for p in append["parameters"]}
    assert params["session_id"]["example"] == "demo"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    folder: Path = tmp_path_factory.mktemp("openapi-examples")
    store = open_store(f"sqlite:///{folder / 'chat.db'}")  # the store's defaults: o200k_base
    _, key = auth.create_key(store, "acme", "examples")
    server = LiveServer(create_app(store, asset_dir=folder / "assets")).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30,
                          headers={"Authorization": f"Bearer {key}"}) as http:
            yield http
    finally:
        server.stop()
        store.close()


def test_each_example_gets_its_answer_from_a_live_server(client: httpx.Client) -> None:
    problems: list[str] = []
    for example in EXAMPLES:
        response = _request(client, example)
        where = f"{example.method} {example.path} ({example.summary})"
        if response.status_code != example.status:
            problems.append(f"{where}: {response.status_code} {response.text[:300]}")
            continue
        if isinstance(example.response, str):
            if example.response not in response.text:
                problems.append(f"{where}: {example.response!r} not in {response.text[:300]!r}")
        elif example.response is not None:
            shown = _loose(example.response, set(example.varies))
            problems += [f"{where}: {m}" for m in json_mismatches(shown, response.json())]
    assert not problems, "\n".join(problems)
