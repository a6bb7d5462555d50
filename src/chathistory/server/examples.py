"""Request and response examples for the OpenAPI document (``openapi.py`` puts them
on each operation; ``/docs`` shows them and pre-fills "Try it out" with them).

One story, much as docs/api.md's curl examples tell it: tenant ``acme`` keeps a
conversation ``demo`` (a turn, a tool call and its result, an image), reads it back,
forks it, edits it, plans a window, moves files and sessions in and out, and deletes
what it made; a few requests on the way are refused (the error examples). The
examples are in the order they make sense in: ``tests/server/test_openapi_examples.py``
sends each request, in this order, to a live server and checks that the answer
holds the example's status and fields (times, request ids and the ids the server
makes differ, and ``varies`` names them), so an example cannot drift from what the
API does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EXAMPLES", "Example", "for_operation"]

_AT = "2026-01-05T09:30:00.000000Z"
_SHA_NOTES = "3a2d855bc8566b54a6251d194fd3c08130b8858c0d6338a5c1f5631eae4eafd5"
_SHA_TOMATO = "76e51c9e2fd0d3e8e7bad923bd5ff30cef1107491665882a6d6d9447ea6e6095"
_TOMATO_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAQAAAACCAIAAADwyuo0AAAAEElEQVR42mP4n+wORwzIHACygg1JFQf1"
               "EgAAAABJRU5ErkJggg==")
"""A 4x2 PNG, base64."""


@dataclass(frozen=True)
class Example:
    """One request and the answer it gets, at its place in the story."""

    method: str
    path: str
    summary: str
    params: Mapping[str, str] = field(default_factory=dict)
    """Path and query parameters (and ``If-Match``)."""
    body: Any = None
    """The JSON body, or a str sent as ``media_type``."""
    media_type: str | None = None
    status: int = 200
    response: Any = None
    """The JSON answer, or a str: text the answer holds."""
    varies: tuple[str, ...] = ()
    """Paths in ``response`` (``$.id``, ``$[2].id``) of values the server makes anew
    each time (ids it generates), besides times and request ids."""

    @property
    def name(self) -> str:
        """A key for the OpenAPI ``examples`` maps: the summary's words joined."""
        return "_".join(re.findall(r"[a-z0-9]+", self.summary.lower())[:6])


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _message(id: str, role: str, *parts: dict[str, Any], tokens: int | None = None,
             **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": id, "role": role, "parts": list(parts)}
    if tokens is not None:
        out.update(created_at=_AT, **more, token_counts={"o200k_base": tokens})
    return out


def _error(type: str, message: str, path: str | None = None) -> dict[str, Any]:
    detail = {"type": type, "message": message, "request_id": "d3b07384d113edec0000000000000042"}
    return {"error": {**detail, "path": path} if path else detail}


def _session(id: str, **fields: Any) -> dict[str, Any]:
    return {"schema_version": 1, "id": id, "tenant": "acme", "user": "ana",
            "metadata": {"title": "Trip to Paris"}, "created_at": _AT, "updated_at": _AT,
            "root_id": "demo", **fields}


SESSION = "/v1/sessions/{session_id}"
MESSAGES = SESSION + "/messages"
_DEMO = {"session_id": "demo"}
_TURN = [_message("m1", "user", _text("What is the capital of France?")),
         _message("m2", "assistant", _text("Paris."))]
_CALL = {"type": "tool_call", "id": "call_1", "name": "get_weather",
         "arguments": {"city": "Paris"}}
_RESULT = {"type": "tool_result", "call_id": "call_1", "content": "18 C, sunny"}
_TOOL_TURN = [_message("m3", "user", _text("And the weather there?")),
              _message("m4", "assistant", _CALL),
              _message("m5", "tool", _RESULT),
              _message("m6", "assistant", _text("18 C and sunny."))]
_IMAGE = {"type": "image", "attachment": {"name": "tomato.png", "mime_type": "image/png",
                                          "data": _TOMATO_PNG}}
_STORED_IMAGE = {"type": "image", "attachment": {
    "id": "0b6f1f53-5f2a-4c56-9a9e-3f0c1f6a2d11", "name": "tomato.png", "size": 73,
    "modality": "image", "mime_type": "image/png", "sha256": _SHA_TOMATO,
    "width": 4, "height": 2}}
_COMPACTION = {"type": "compaction", "provider": "openai_responses",
               "data": "gAAAAABpZ3Vlc3M-opaque-to-all-but-openai",
               "provider_metadata": {"openai_responses": {"id": "cmp_1",
                                                          "created_by": "resp_1"}}}
"""What ``from_openai_responses`` makes of a Responses ``compaction`` item."""
_COMPACTED = [_message("r1", "assistant", _COMPACTION),
              _message("r2", "user", _text("And what about Rome?")),
              _message("r3", "assistant", _text("Rome is the capital of Italy."))]
_NOTES = "The meeting is at 10."
_BRANCH = "e0c5b8a4-1d2f-4e63-8a57-9b1c0d3e2f41"
"""The id the server gave the branch an edit made (a UUID)."""

EXAMPLES: list[Example] = [
    Example("GET", "/healthz", "The process is up", response={"status": "ok"}),
    Example("GET", "/readyz", "The store answers", response={"status": "ready"}),
    Example("GET", "/metrics", "Prometheus text",
            response="# TYPE chathistory_http_requests_total counter"),
    Example("GET", "/openapi.json", "This document",
            response={"openapi": "3.1.0", "info": {"title": "chathistory"}}),
    Example("GET", "/v1/me", "The key's tenant",
            response={"tenant": "acme", "counter": "o200k_base", "key_id": "5f0c2a9e1b7d3c48",
                      "keys_required": True}),
    # ------------------------------------------------------------ sessions
    Example("POST", "/v1/sessions", "A session with an id, a user and metadata",
            body={"id": "demo", "user": "ana", "metadata": {"title": "Trip to Paris"}},
            status=201, response=_session("demo")),
    Example("GET", "/v1/sessions", "Ana's sessions, last changed first",
            params={"user": "ana", "order": "recent", "limit": "10"},
            response={"items": [_session("demo", title="Trip to Paris", preview=None)],
                      "total": 1, "total_is_lower_bound": False, "next_cursor": None}),
    Example("PATCH", SESSION, "New metadata, if still at version 0",
            params={**_DEMO, "If-Match": '"0"'},
            body={"metadata": {"title": "Trip to Paris", "starred": True}},
            response=_session("demo", version=1,
                              metadata={"title": "Trip to Paris", "starred": True})),
    Example("PATCH", SESSION, "If-Match a version the session has moved past",
            params={**_DEMO, "If-Match": '"0"'}, body={"state": {"step": 2}}, status=412,
            response=_error("precondition_failed", "session 'demo' is at version 1, not 0")),
    Example("POST", "/v1/sessions", "An id that is taken", body={"id": "demo"}, status=409,
            response=_error("conflict", "session 'demo' exists")),
    # ------------------------------------------------------------ messages
    Example("POST", MESSAGES, "A turn, each message with its id",
            params=_DEMO, body={"messages": _TURN}, response={"version": 2}),
    Example("POST", MESSAGES, "The same again, as a retry: nothing stored, same version",
            params=_DEMO, body={"messages": _TURN}, response={"version": 2}),
    Example("POST", MESSAGES, "A part of a type that does not exist",
            params=_DEMO,
            body={"messages": [_message("m3", "user", {"type": "txt", "text": "hi"})]},
            status=422, response=_error("invalid_message", "Invalid value 'txt'",
                                        "$.messages[0].parts[0].type")),
    Example("POST", MESSAGES, "A tool call and its result",
            params=_DEMO, body={"messages": _TOOL_TURN}, response={"version": 3}),
    Example("GET", MESSAGES, "The newest messages, whole tool-call groups",
            params={**_DEMO, "tail": "2"},
            response={"messages": [_message("m4", "assistant", _CALL, tokens=14),
                                   _message("m5", "tool", _RESULT, tokens=11),
                                   _message("m6", "assistant", _text("18 C and sunny."),
                                            tokens=9)]}),
    Example("GET", MESSAGES, "The newest messages within 40 tokens",
            params={**_DEMO, "max_tokens": "40", "keep_system": "true"},
            response={"messages": [_message("m4", "assistant", _CALL, tokens=14),
                                   _message("m5", "tool", _RESULT, tokens=11),
                                   _message("m6", "assistant", _text("18 C and sunny."),
                                            tokens=9)]}),
    Example("GET", MESSAGES, "Two selectors at once",
            params={**_DEMO, "tail": "2", "max_tokens": "40"}, status=400,
            response=_error("bad_request", "give exactly one selector: tail=N, max_tokens=N, "
                            "start=I[&stop=J] or since=compaction")),
    Example("GET", MESSAGES, "Positions 0 to 2 in OpenAI Chat Completions' shape",
            params={**_DEMO, "start": "0", "stop": "2", "format": "openai_chat"},
            response={"messages": [{"role": "user", "content": "What is the capital of France?"},
                                   {"role": "assistant", "content": "Paris."}]}),
    Example("GET", SESSION + "/context", "The first message and the newest",
            params={**_DEMO, "head": "1", "tail": "1"},
            response={"messages": [
                _message("m1", "user", _text("What is the capital of France?"), tokens=11),
                _message("m6", "assistant", _text("18 C and sunny."), tokens=9)]}),
    Example("GET", MESSAGES + "/{message_id}", "One message",
            params={**_DEMO, "message_id": "m5"},
            response=_message("m5", "tool", _RESULT, tokens=11)),
    Example("GET", SESSION + "/window", "What 40 tokens would hold now (nothing written)",
            params={**_DEMO, "max_tokens": "40"},
            response={"max_tokens": 40, "tokens": 37, "messages": 3, "left_out": 3,
                      "message_ids": ["m4", "m5", "m6"], "gaps": [[None, "m4", 3]]}),
    Example("POST", MESSAGES, "An image inline: name, mime_type and base64 data",
            params=_DEMO, body={"messages": [
                _message("m7", "user", _text("What colour is this?"), _IMAGE),
                _message("m8", "assistant", _text("Tomato red."))]},
            response={"version": 4}),
    Example("GET", MESSAGES + "/{message_id}", "An image as stored: what its bytes say",
            params={**_DEMO, "message_id": "m7"},
            response=_message("m7", "user", _text("What colour is this?"), _STORED_IMAGE,
                              tokens=264),
            varies=("$.parts[1].attachment.id",)),
    Example("GET", SESSION, "A session", params=_DEMO,
            response=_session("demo", version=4, message_count=8, token_count=332,
                              metadata={"title": "Trip to Paris", "starred": True})),
    # ------------------------------------------------------------ search
    Example("GET", "/v1/search", "Messages with both words, best first",
            params={"q": "capital fran*", "limit": "5"},
            response={"items": [{
                "session_id": "demo", "seq": 0,
                "message": _message("m1", "user", _text("What is the capital of France?"),
                                    tokens=11),
                "score": 1.0, "snippet": "What is the capital of France?",
                "marks": [[12, 19], [23, 29]]}], "next_cursor": None},
            varies=("$.items[0].score",)),
    Example("GET", "/v1/search", "A query without a word", params={"q": "?!"}, status=400,
            response=_error("bad_request",
                            "q: a search needs at least one word (letters or digits)")),
    Example("GET", SESSION, "No such session (or another tenant's)",
            params={"session_id": "nope"}, status=404,
            response=_error("not_found", "no session 'nope'")),
    # ------------------------------------------------------------ branches
    Example("POST", SESSION + "/fork", "A fork after the second message",
            params=_DEMO, body={"at_message_id": "m2", "new_session_id": "demo-rome"},
            status=201, response=_session("demo-rome", parent_id="demo", fork_seq=2,
                                          message_count=2, token_count=17)),
    Example("POST", SESSION + "/edit", "Another third message: a new branch",
            params=_DEMO, body={"message_id": "m3", "message": _message(
                "m3-lyon", "user", _text("And in Lyon?"))},
            status=201, response=_session(_BRANCH, version=1, parent_id="demo", fork_seq=2,
                                          message_count=3, token_count=25),
            varies=("$.id",)),
    Example("GET", SESSION + "/lineage", "The session's tree", params=_DEMO,
            response=[_session("demo", version=4, message_count=8, token_count=332,
                               metadata={"title": "Trip to Paris", "starred": True}),
                      _session("demo-rome", parent_id="demo", fork_seq=2, message_count=2,
                               token_count=17),
                      _session(_BRANCH, version=1, parent_id="demo", fork_seq=2,
                               message_count=3, token_count=25)],
            varies=("$[2].id",)),
    Example("POST", SESSION + "/window", "This turn's window within 8,000 tokens",
            params={"session_id": "demo-rome"}, body={"max_tokens": 8000},
            response={"messages": [
                _message("m1", "user", _text("What is the capital of France?"), tokens=11,
                         kv_size=11, kv_start=0),
                _message("m2", "assistant", _text("Paris."), tokens=6, kv_size=6,
                         kv_start=11)],
                "reused_prefix_tokens": 0, "new_tokens": 17, "evicted_ids": [],
                "total_tokens": 20, "head_count": 2, "cache_breakpoint_id": "m2"}),
    Example("POST", SESSION + "/mark", "Mark a message as out of the KV cache",
            params={"session_id": "demo-rome"}, body={"ids": ["m2"], "status": 0},
            response={"changed": 1}),
    Example("POST", MESSAGES, "A provider's compaction, then the next turn",
            params={"session_id": "demo-rome"}, body={"messages": _COMPACTED},
            response={"version": 2}),
    Example("GET", MESSAGES, "From the last compaction on, and any system prompt",
            params={"session_id": "demo-rome", "since": "compaction", "keep_system": "true"},
            response={"messages": [
                _message("r1", "assistant", _COMPACTION, tokens=12),
                _message("r2", "user", _text("And what about Rome?"), tokens=9),
                _message("r3", "assistant", _text("Rome is the capital of Italy."),
                         tokens=11)]}),
    Example("GET", MESSAGES, "A since other than compaction",
            params={"session_id": "demo-rome", "since": "yesterday"}, status=400,
            response=_error("bad_request",
                            "query parameter since must be compaction, not 'yesterday'")),
    Example("POST", SESSION + "/reduce", "Keep the newest message, mark the others",
            params=_DEMO, body={"type": "count", "max_messages": 1},
            response={"kept": ["m8"], "removed": ["m1", "m2", "m3", "m4", "m5", "m6", "m7"]}),
    Example("POST", SESSION + "/pop", "Take the newest message back", params=_DEMO,
            response={"message": _message("m8", "assistant", _text("Tomato red."), tokens=8)}),
    Example("DELETE", MESSAGES + "/{message_id}", "Delete a message from the middle",
            params={**_DEMO, "message_id": "m3"},
            response=_session("demo", version=6, message_count=6, token_count=315,
                              metadata={"title": "Trip to Paris", "starred": True})),
    Example("DELETE", MESSAGES + "/{message_id}", "A message a fork shares",
            params={**_DEMO, "message_id": "m1"}, status=409,
            response=_error("conflict", "fork 'demo-rome' shares message 0 of session "
                            "'demo'; change the fork instead"),
            varies=("$.error.message",)),  # (either fork: both share it)
    # ------------------------------------------------------------ assets
    Example("POST", "/v1/assets", "A text file", params={"name": "notes.txt"},
            body=_NOTES, media_type="text/plain", status=201,
            response={"id": "7d9e8f60-1a2b-4c3d-9e8f-0a1b2c3d4e5f", "name": "notes.txt",
                      "size": 21, "modality": "document", "mime_type": "text/plain",
                      "sha256": _SHA_NOTES},
            varies=("$.id",)),
    Example("GET", "/v1/assets/{sha256}", "The file's bytes", params={"sha256": _SHA_NOTES},
            response=_NOTES),
    # ------------------------------------------------------------ data
    Example("GET", "/v1/export", "One session as JSON lines",
            params={"session_id": "demo-rome"},
            response='{"kind":"session","session":{"id":"demo-rome","tenant":"acme"'),
    Example("POST", "/v1/import", "A session and its message, as JSON lines",
            body=('{"kind":"session","session":{"id":"imported","user":"ana"}}\n'
                  '{"kind":"message","session_id":"imported","message":'
                  '{"id":"i1","role":"user","parts":[{"type":"text","text":"Hello again"}]}}\n'),
            media_type="application/x-ndjson", response={"added": 1}),
    Example("DELETE", MESSAGES, "Remove every message", params={"session_id": "imported"},
            response={"version": 2}),
    Example("DELETE", SESSION, "Delete a session and its forks",
            params={"session_id": "demo", "cascade": "true"}, status=204),
    Example("POST", "/v1/purge-expired", "Expired sessions deleted", response={"purged": 0}),
    Example("POST", "/v1/erase", "Every session of a user", body={"user": "ana"},
            response={"deleted": 1}),
]


def for_operation(method: str, path: str) -> list[Example]:
    """The examples of one operation, in story order."""
    return [e for e in EXAMPLES if e.method == method and e.path == path]
