"""RemoteStore: the ``Store`` protocol over the chathistory service's HTTP API.

``RemoteStore("http://host:8000", api_key)`` (or ``open_store("http://...")``;
the key may also come from ``CHATHISTORY_API_KEY``) behaves like any other
store, through the server's store. Its tenant is its key's: ``tenant=`` may be
left out, or name that tenant, or one of the tenants whose keys were given in
``tenant_keys``; any other tenant raises ``ValueError``.

Requests that fail to connect are retried with backoff (they never reached
the server); reads and appends (idempotent by message id) are also retried
after a timeout, a dropped connection or a 502/503/504; any request after a 429
(refused before any work). A ``Retry-After`` in seconds is waited for (30 s at
most). Error answers become the library's errors: ``InvalidMessage`` with the same
``path``, ``NotFound``, ``IdReused`` (a 409 ``id_reused``), ``Conflict`` (other 409s
and 412), ``StoreUnavailable`` (503 once
the retries are spent) and ``StorageFull`` (507).

Attachments over ``upload_over`` bytes are uploaded through ``/v1/assets``
before an append and sent as references, keeping JSON bodies small. Those
files live in the server's asset directory, not in the store: deleting the
sessions that use them does not delete them.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, NoReturn

import msgspec

from ..errors import (
    ChatHistoryError,
    Conflict,
    IdReused,
    InvalidArgument,
    InvalidMessage,
    MissingDependency,
    NotFound,
    StorageFull,
    StoreUnavailable,
)
from ..model import Attachment, KVStatus, Message
from ..model.codec import strip_part
from ..tokens import TokenCounter, get_counter
from .aio import AsyncStoreAdapter
from .checks import validated
from .model import Page, Session
from .search import SearchPage

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("httpx", "client") from exc

__all__ = ["AsyncRemoteStore", "RemoteError", "RemoteStore"]

_RETRY_STATUS = frozenset({502, 503, 504})
_sessions_decoder = msgspec.json.Decoder(list[Session])
_encoder = msgspec.json.Encoder()


class RemoteError(ChatHistoryError):
    """The server refused a request for a reason the library has no error for
    (401, 403, 413, 415, 5xx); ``status`` and ``type`` say which. A 401's message
    says where this client takes its key from (``CHATHISTORY_API_KEY``)."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(f"{status} {type}: {message}")
        self.status, self.type, self.message = status, type, message


class _RawMessages(msgspec.Struct):
    messages: msgspec.Raw


_raw_messages_decoder = msgspec.json.Decoder(_RawMessages)
_message_list_decoder = msgspec.json.Decoder(list[Message])


def _tail_params(n: int, include_marked: bool) -> dict[str, Any]:
    return {"tail": n, "include_marked": "true" if include_marked else "false"}


def _range_params(start: int, stop: int | None, include_marked: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"start": start,
                              "include_marked": "true" if include_marked else "false"}
    if stop is not None:
        params["stop"] = stop
    return params


def _since_compaction_params(keep_system: bool) -> dict[str, Any]:
    return {"since": "compaction", "keep_system": "true" if keep_system else "false"}


class _Popped(msgspec.Struct):
    message: Message | None


class _PageOut(msgspec.Struct):
    items: list[Session]
    next_cursor: str | None = None


_search_decoder = msgspec.json.Decoder(SearchPage)


def _code_points(text: str, marks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``marks`` in UTF-16 code units of ``text`` (the API's) as offsets in code points
    (Python's)."""
    at: dict[int, int] = {}
    units = 0
    for i, ch in enumerate(text):
        at[units] = i
        units += 2 if ord(ch) > 0xFFFF else 1
    at[units] = len(text)
    return [(at.get(start, start), at.get(end, end)) for start, end in marks]


def _query_params(metadata: Mapping[str, Any] | None, **values: str | int | None
                  ) -> list[tuple[str, str]]:
    """Query parameters: ``values`` that are not None, then the metadata filter as
    ``metadata.<key>`` parameters, each value as JSON."""
    params = [(name, str(value)) for name, value in values.items() if value is not None]
    return params + [(f"metadata.{key}", _encoder.encode(value).decode())
                     for key, value in (metadata or {}).items()]


class _Me(msgspec.Struct):
    tenant: str
    counter: str
    key_id: str | None = None


def _seconds(ttl: timedelta | float | None) -> float | None:
    if ttl is None:
        return None
    return ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)


def _drop_none(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


class RemoteStore:
    """A ``Store`` served by ``chathistory serve`` at ``base_url``."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, tenant_keys: Mapping[str, str] | None = None,
                 upload_over: int = 4 * 1024 * 1024,
                 counter: str | TokenCounter | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("CHATHISTORY_API_KEY")
        self.retries = retries
        self.upload_over = upload_over
        self.tenant_keys = dict(tenant_keys or {})
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout, limits=limits,
                                    transport=transport, headers={"Accept": "application/json"})
        self._me: _Me | None = None
        self._counter: TokenCounter | None = None if counter is None else get_counter(counter)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RemoteStore:
        return cls(url, **options)

    # ---------------------------------------------------------------- plumbing

    def _headers(self, tenant: str | None) -> dict[str, str]:
        key = self.api_key
        if tenant is not None and tenant in self.tenant_keys:
            key = self.tenant_keys[tenant]
        elif tenant is not None and tenant != self.tenant:
            raise ValueError(f"this RemoteStore acts for tenant {self.tenant!r} (its API "
                             f"key's), not {tenant!r}")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _request(self, method: str, path: str, *, tenant: str | None = None,
                 idempotent: bool | None = None, params: Any = None, body: Any = None,
                 content: Any = None, headers: dict[str, str] | None = None) -> httpx.Response:
        all_headers = self._headers(tenant)
        if headers:
            all_headers.update(headers)
        if body is not None:
            content = _encoder.encode(body)
            all_headers["Content-Type"] = "application/json"
        retry_after_send = method == "GET" if idempotent is None else idempotent
        attempt = 0
        while True:
            try:
                response = self._client.request(method, path, params=params, content=content,
                                                headers=all_headers)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
                if attempt >= self.retries:
                    raise
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError):
                if not retry_after_send or attempt >= self.retries:
                    raise
            else:
                status = response.status_code
                # a 429 was refused before any work: safe to send again, whatever it was
                retry = (status == 429 or (status in _RETRY_STATUS and retry_after_send))
                if not retry or attempt >= self.retries:
                    if status >= 400:
                        _raise_for(response)
                    return response
                hinted = _retry_after(response)
                if hinted is not None:  # the server says when: wait that long (30 s at most)
                    time.sleep(min(30.0, hinted) * (1 + 0.2 * random.random()))
                    attempt += 1
                    continue
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
            attempt += 1

    def _me_info(self) -> _Me:
        if self._me is None:
            response = self._request("GET", "/v1/me")
            self._me = msgspec.json.decode(response.content, type=_Me)
        return self._me

    @property
    def tenant(self) -> str:
        """The tenant of this store's API key (asked of the server once)."""
        return self._me_info().tenant

    @property
    def counter(self) -> TokenCounter:
        """The server store's token counter (asked of the server once)."""
        if self._counter is None:
            self._counter = _counter_named(self._me_info().counter)
        return self._counter

    @counter.setter
    def counter(self, value: TokenCounter) -> None:
        self._counter = value

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _sid(session_id: str) -> str:
        from urllib.parse import quote

        return "/v1/sessions/" + quote(session_id, safe="")

    # ---------------------------------------------------------------- sessions

    def create_session(self, session_id: str | None = None, *, tenant: str | None = None,
                       user: str | None = None, metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None) -> Session:
        body = _drop_none({"id": session_id, "user": user, "metadata": metadata,
                           "state": state, "ttl_seconds": _seconds(ttl)})
        response = self._request("POST", "/v1/sessions", tenant=tenant, body=body)
        return _session(response)

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Session:
        return _session(self._request("GET", self._sid(session_id), tenant=tenant))

    def list_sessions(self, *, tenant: str | None = None, user: str | None = None,
                      metadata: Mapping[str, Any] | None = None, limit: int = 50,
                      cursor: str | None = None, order: Literal["created", "recent"] = "created",
                      query: str | None = None) -> Page[Session]:
        params = _query_params(metadata, limit=limit, order=None if order == "created" else order,
                               q=query or None, user=user, cursor=cursor or None)
        response = self._request("GET", "/v1/sessions", tenant=tenant, params=params)
        page = msgspec.json.decode(response.content, type=_PageOut)
        return Page(items=page.items, next_cursor=page.next_cursor)

    def search(self, query: str, *, tenant: str | None = None, user: str | None = None,
               session_id: str | None = None, metadata: Mapping[str, Any] | None = None,
               limit: int = 20, cursor: str | None = None) -> SearchPage:
        """``GET /v1/search``: the server store's ``search`` over this key's tenant."""
        params = _query_params(metadata, q=query, limit=limit, user=user,
                               session_id=session_id, cursor=cursor or None)
        response = self._request("GET", "/v1/search", tenant=tenant, params=params)
        page = _search_decoder.decode(response.content)
        for hit in page.items:  # the API's marks are in UTF-16 code units
            hit.marks = _code_points(hit.snippet, hit.marks)
        return page

    def update_session(self, session_id: str, *, tenant: str | None = None,
                       metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None,
                       expected_version: int | None = None) -> Session:
        body = _drop_none({"metadata": metadata, "state": state, "ttl_seconds": _seconds(ttl)})
        response = self._request("PATCH", self._sid(session_id), tenant=tenant, body=body,
                                 headers=_if_match(expected_version))
        return _session(response)

    def delete_session(self, session_id: str, *, tenant: str | None = None,
                       cascade: bool = False) -> None:
        self._request("DELETE", self._sid(session_id), tenant=tenant,
                      params={"cascade": "true"} if cascade else None)

    # ---------------------------------------------------------------- messages

    def append(self, session_id: str, messages: Iterable[Message], *,
               tenant: str | None = None, expected_version: int | None = None,
               state: dict[str, Any] | None = None, reject_orphans: bool = False) -> int:
        # the same checks as every store (the server repeats them): one helper for both
        batch = [self._uploaded(m, tenant) for m in validated(messages)]
        body: dict[str, Any] = {"messages": batch}
        if state is not None:
            body["state"] = state
        if reject_orphans:
            body["reject_orphans"] = True
        try:
            content = _encoder.encode(body)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"state is not JSON-serializable: {exc}", "$.state") from None
        try:
            response = self._request("POST", self._sid(session_id) + "/messages",
                                     tenant=tenant, idempotent=True, content=content,
                                     headers={"Content-Type": "application/json",
                                              **_if_match(expected_version)})
        except InvalidMessage as exc:  # the body's path -> the Store API's ($[i]...)
            raise _rerooted(exc, "$.messages", "$") from None
        try:
            version: int = msgspec.json.decode(response.content)["version"]
        except (msgspec.DecodeError, KeyError, TypeError) as exc:
            raise RemoteError(response.status_code, "bad_response", repr(exc)) from None
        return version

    def _uploaded(self, message: Message, tenant: str | None) -> Message:
        """The message with attachments over ``upload_over`` bytes uploaded and
        replaced by references."""
        if not isinstance(message, Message) or not message.has_media:
            return message
        big = [a for a in message.attachments
               if a.data is not None and len(a.data) > self.upload_over]
        if not big:
            return message
        for att in big:
            assert att.data is not None
            self.upload_asset(att.data, name=att.name, mime_type=att.mime_type, tenant=tenant)
        found: dict[str, bytes] = {}
        parts = [strip_part(p, found) for p in message.parts]
        return msgspec.structs.replace(message, parts=parts)

    def _messages_json(self, session_id: str, path: str, tenant: str | None,
                       params: Any) -> bytes:
        response = self._request("GET", self._sid(session_id) + path, tenant=tenant,
                                 params=params)
        return bytes(_raw_messages_decoder.decode(response.content).messages)

    def _messages(self, session_id: str, path: str, tenant: str | None,
                  params: Any) -> list[Message]:
        return _message_list_decoder.decode(self._messages_json(session_id, path, tenant,
                                                                params))

    def context(self, session_id: str, head: int, tail: int, *,
                tenant: str | None = None) -> list[Message]:
        return self._messages(session_id, "/context", tenant, {"head": head, "tail": tail})

    def tail(self, session_id: str, n: int, *, tenant: str | None = None,
             include_marked: bool = False) -> list[Message]:
        return self._messages(session_id, "/messages", tenant, _tail_params(n, include_marked))

    def tail_json(self, session_id: str, n: int, *, tenant: str | None = None,
                  include_marked: bool = False) -> bytes:
        """``tail()`` as the server's JSON array, undecoded."""
        return self._messages_json(session_id, "/messages", tenant,
                                   _tail_params(n, include_marked))

    def window(self, session_id: str, max_tokens: int,
               counter: str | TokenCounter | None = None, *, tenant: str | None = None,
               keep_system: bool = False) -> list[Message]:
        return self._messages(session_id, "/messages", tenant,
                              self._window_params(max_tokens, counter, keep_system))

    def window_json(self, session_id: str, max_tokens: int,
                    counter: str | TokenCounter | None = None, *, tenant: str | None = None,
                    keep_system: bool = False) -> bytes:
        """``window()`` as the server's JSON array, undecoded."""
        return self._messages_json(session_id, "/messages", tenant,
                                   self._window_params(max_tokens, counter, keep_system))

    def _window_params(self, max_tokens: int, counter: str | TokenCounter | None,
                       keep_system: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"max_tokens": max_tokens}
        if counter is not None:
            name = counter if isinstance(counter, str) else counter.name
            if self._counter is None or name != self._counter.name:
                params["counter"] = name
        if keep_system:
            params["keep_system"] = "true"
        return params

    def range(self, session_id: str, start: int = 0, stop: int | None = None, *,
              tenant: str | None = None, include_marked: bool = True) -> list[Message]:
        return self._messages(session_id, "/messages", tenant,
                              _range_params(start, stop, include_marked))

    def range_json(self, session_id: str, start: int = 0, stop: int | None = None, *,
                   tenant: str | None = None, include_marked: bool = True) -> bytes:
        """``range()`` as the server's JSON array, undecoded."""
        return self._messages_json(session_id, "/messages", tenant,
                                   _range_params(start, stop, include_marked))

    def since_compaction(self, session_id: str, *, tenant: str | None = None,
                         keep_system: bool = False) -> list[Message]:
        return self._messages(session_id, "/messages", tenant,
                              _since_compaction_params(keep_system))

    def since_compaction_json(self, session_id: str, *, tenant: str | None = None,
                              keep_system: bool = False) -> bytes:
        """``since_compaction()`` as the server's JSON array, undecoded."""
        return self._messages_json(session_id, "/messages", tenant,
                                   _since_compaction_params(keep_system))

    def get(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message:
        from urllib.parse import quote

        response = self._request("GET", f"{self._sid(session_id)}/messages/"
                                 f"{quote(message_id, safe='')}", tenant=tenant)
        return msgspec.json.decode(response.content, type=Message)

    def count(self, session_id: str, *, tenant: str | None = None) -> int:
        """Messages in the session (marked ones included)."""
        return self.get_session(session_id, tenant=tenant).message_count

    def pop(self, session_id: str, *, tenant: str | None = None,
            expected_version: int | None = None) -> Message | None:
        response = self._request("POST", self._sid(session_id) + "/pop", tenant=tenant,
                                 headers=_if_match(expected_version))
        return msgspec.json.decode(response.content, type=_Popped).message

    def delete_message(self, session_id: str, message_id: str, *, tenant: str | None = None,
                       expected_version: int | None = None) -> Session:
        from urllib.parse import quote

        return _session(self._request(
            "DELETE", f"{self._sid(session_id)}/messages/{quote(message_id, safe='')}",
            tenant=tenant, headers=_if_match(expected_version)))

    def clear(self, session_id: str, *, tenant: str | None = None) -> int:
        response = self._request("DELETE", self._sid(session_id) + "/messages", tenant=tenant)
        version: int = msgspec.json.decode(response.content)["version"]
        return version

    def mark(self, session_id: str, message_ids: Iterable[str], status: KVStatus, *,
             tenant: str | None = None) -> int:
        body = {"ids": list(message_ids), "status": int(KVStatus(status))}
        response = self._request("POST", self._sid(session_id) + "/mark", tenant=tenant,
                                 body=body, idempotent=True)
        changed: int = msgspec.json.decode(response.content)["changed"]
        return changed

    # ---------------------------------------------------------------- branches

    def fork(self, session_id: str, at_message_id: str | None = None, *,
             tenant: str | None = None, new_session_id: str | None = None) -> Session:
        body = _drop_none({"at_message_id": at_message_id, "new_session_id": new_session_id})
        return _session(self._request("POST", self._sid(session_id) + "/fork", tenant=tenant,
                                      body=body))

    def edit(self, session_id: str, message_id: str, message: Message, *,
             tenant: str | None = None) -> Session:
        message.validate()
        body = {"message_id": message_id, "message": self._uploaded(message, tenant)}
        try:
            response = self._request("POST", self._sid(session_id) + "/edit", tenant=tenant,
                                     body=body)
        except InvalidMessage as exc:
            raise _rerooted(exc, "$.message", "$") from None
        return _session(response)

    def lineage(self, session_id: str, *, tenant: str | None = None) -> list[Session]:
        response = self._request("GET", self._sid(session_id) + "/lineage", tenant=tenant)
        return [_from_versioned(s) for s in msgspec.json.decode(response.content)]

    # ---------------------------------------------------------------- retention

    def erase(self, *, tenant: str, user: str | None = None) -> int:
        body = {"all": True} if user is None else {"user": user}
        response = self._request("POST", "/v1/erase", tenant=tenant, body=body)
        deleted: int = msgspec.json.decode(response.content)["deleted"]
        return deleted

    def purge_expired(self, *, tenant: str | None = None) -> int:
        """Delete the expired sessions of this store's tenant; returns how many."""
        response = self._request("POST", "/v1/purge-expired", tenant=tenant)
        purged: int = msgspec.json.decode(response.content)["purged"]
        return purged

    # ---------------------------------------------------------------- assets

    def get_asset(self, sha256: str, *, tenant: str | None = None) -> bytes:
        from urllib.parse import quote

        return self._request("GET", f"/v1/assets/{quote(sha256, safe='')}",
                             tenant=tenant).content

    def upload_asset(self, data: bytes, *, name: str | None = None,
                     mime_type: str | None = None, tenant: str | None = None) -> Attachment:
        """Upload bytes to the server's asset storage; returns the attachment (no
        data) for messages to reference."""
        params = _drop_none({"name": name, "mime_type": mime_type})
        response = self._request("POST", "/v1/assets", tenant=tenant, params=params,
                                 content=data, idempotent=True,
                                 headers={"Content-Type": "application/octet-stream"})
        return msgspec.json.decode(response.content, type=Attachment)

    def resolve(self, messages: Sequence[Message], *, tenant: str | None = None
                ) -> list[Message]:
        """Copies of ``messages`` with attachment bytes filled in from the server."""
        from ..model.codec import attach_part

        cache: dict[str, Attachment] = {}
        found: dict[str, bytes] = {}
        for m in messages:
            for att in m.attachments:
                if att.data is None and att.sha256 not in found:
                    with contextlib.suppress(NotFound):
                        found[att.sha256] = self.get_asset(att.sha256, tenant=tenant)
        out = []
        for m in messages:
            if m.has_media:
                parts = [attach_part(p, found, cache) for p in m.parts]
                m = msgspec.structs.replace(m, parts=parts)
            out.append(m)
        return out

    # ---------------------------------------------------------------- export / import

    def export(self, *, tenant: str | None = None,
               session_ids: Iterable[str] | None = None) -> Iterator[bytes]:
        params: list[tuple[str, str | int | float | bool | None]] | None = None
        if session_ids is not None:
            params = [("session_id", s) for s in session_ids]
        headers = self._headers(tenant)
        with self._client.stream("GET", "/v1/export", params=params, headers=headers) as resp:
            if resp.status_code >= 400:
                resp.read()
                _raise_for(resp)
            pending = b""
            for chunk in resp.iter_bytes():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line + b"\n"
            if pending.strip():
                yield pending

    def import_(self, lines: Iterable[bytes | str], *, tenant: str | None = None) -> int:
        def body() -> Iterator[bytes]:
            for line in lines:
                data = line.encode("utf-8") if isinstance(line, str) else line
                yield data if data.endswith(b"\n") else data + b"\n"

        response = self._request("POST", "/v1/import", tenant=tenant, idempotent=False,
                                 content=body(),
                                 headers={"Content-Type": "application/x-ndjson"})
        added: int = msgspec.json.decode(response.content)["added"]
        return added


def _counter_named(name: str) -> TokenCounter:
    """The counter whose ``name`` the server reported (``approx:4`` included)."""
    if name.startswith("approx:"):
        from ..tokens import ApproxCounter

        try:
            return ApproxCounter(float(name.split(":", 1)[1]))
        except ValueError:
            pass
    try:
        return get_counter(name)
    except ValueError:
        raise RemoteError(200, "unknown_counter", f"the server counts tokens with {name!r}, "
                          "which this process does not know; pass counter= to RemoteStore"
                          ) from None


def _rerooted(exc: InvalidMessage, prefix: str, root: str) -> InvalidMessage:
    if exc.path == prefix or exc.path.startswith((prefix + "[", prefix + ".")):
        return InvalidMessage(exc.reason, root + exc.path[len(prefix):])
    return exc


def _if_match(expected_version: int | None) -> dict[str, str]:
    return {} if expected_version is None else {"If-Match": f'"{expected_version}"'}


def _from_versioned(data: dict[str, Any]) -> Session:
    return Session.from_dict(data)


def _session(response: httpx.Response) -> Session:
    return Session.from_dict(msgspec.json.decode(response.content))


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header in seconds (an HTTP date is not used)."""
    value = response.headers.get("retry-after", "").strip()
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None


def _key_hint(response: httpx.Response) -> str:
    """What to do about a 401: where this client takes its key from."""
    try:
        sent = "authorization" in response.request.headers
    except RuntimeError:  # a response built without its request
        sent = False
    make = ("`chathistory keys create TENANT --store URL` on the server's store makes one "
            "(a key sees only its tenant's sessions)")
    if sent:
        return (". The server does not accept the API key this client sent (from "
                "CHATHISTORY_API_KEY, api_key= or tenant_keys=): revoked, or of another "
                f"store; {make}")
    return (". This client sent no API key: set CHATHISTORY_API_KEY to a key of this "
            f"server (or pass api_key= to RemoteStore); {make}")


def _raise_for(response: httpx.Response) -> NoReturn:
    status = response.status_code
    try:
        error = msgspec.json.decode(response.content)["error"]
        kind, message = str(error["type"]), str(error["message"])
        path = error.get("path")
        message_id, field = error.get("message_id"), error.get("field")
    except Exception:
        kind, message, path = "http_error", response.text[:500], None
        message_id = field = None
    if status == 422 and kind == "invalid_message":
        raise InvalidMessage(message, path or "$")
    if status == 404 and kind == "not_found":
        raise NotFound(message)
    if status == 409 and kind == "id_reused":
        raise IdReused(str(message_id), str(field), message=message)
    if status in (409, 412):
        raise Conflict(message)
    if status == 400:
        raise InvalidArgument(message)
    if status == 401:
        message += _key_hint(response)
    hinted = _retry_after(response)
    if status == 507:
        raise StorageFull(message, retry_after=30.0 if hinted is None else hinted)
    if status == 503 and kind in ("store_unavailable", "busy"):
        raise StoreUnavailable(message, retry_after=1.0 if hinted is None else hinted)
    raise RemoteError(status, kind, message)


class AsyncRemoteStore(AsyncStoreAdapter):
    """``RemoteStore`` as an ``AsyncStore`` (its calls run in worker threads)."""

    def __init__(self, base_url: str, api_key: str | None = None, **options: Any) -> None:
        remote = RemoteStore(base_url, api_key, **options)
        super().__init__(remote)
        self.store: RemoteStore = remote

    @property
    def counter(self) -> TokenCounter:
        return self.store.counter

    @counter.setter
    def counter(self, value: TokenCounter) -> None:
        self.store.counter = value
