"""``RedisStore``: the ``_b_*`` primitives on redis-py (one node or a cluster),
optimistic appends (``_Txn``) and the data migrations."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from ...errors import ChatHistoryError, Conflict, MissingDependency
from ...model import KEPT_ROLES
from ...tokens import TokenCounter
from ..backend import Span, keep_bounded, recent_key
from ..base import BaseStore
from ..model import SESSION_DECODER, Row, Session
from ..regroup import regroup_spans
from ..search import search_option
from . import scripts
from .combine import ScriptCombiner
from .keys import (
    PREFIX_PATTERN,
    SessionKeys,
    escape,
    index_member,
    pack_row,
    recent_member,
    unpack_row,
)
from .search import RedisSearch
from .wire import Direct, run_script

__all__ = ["RedisStore"]

T = TypeVar("T")
_CHUNK = 1000
_WRITTEN_SESSIONS = 4096
"""Sessions whose last write by this process is kept for the next append's plan."""
_MISSED = object()
_HOLD_MS = 10_000  # a deletion holds its session's appends off at most this long (a crash)

_Written = tuple[tuple[str, str, str], Session]
"""A session as this process last wrote it: its (version, incarnation, epoch) as the
session hash holds them, and the session."""

MIGRATIONS = ("m003_regroup",)
"""Named data steps, recorded in the ``P:migrations`` set once applied (Redis has no
schema; m001 and m002 were the SQL stores' own)."""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Txn:
    """One optimistic attempt: reads through the client, buffers the write."""

    def __init__(self, store: RedisStore, tenant: str, session_id: str,
                 ids: Sequence[str] = (), written: _Written | None = None) -> None:
        self.store, self.tenant, self.session_id = store, tenant, session_id
        self.keys = store._keys(tenant, session_id)
        self.session: Session | None
        if written is not None:
            # planned on the session as this process last wrote it, none of the batch's
            # ids taken to be stored: APPEND checks both and writes nothing if either is
            # wrong (RedisStore._append_as_written)
            self.token, self.session = written
            self._scores: dict[str, Any] = dict.fromkeys(ids)
        else:
            # the session and the batch's ids in one round trip (both in the session's slot)
            pipe = store._r.pipeline(transaction=False)
            pipe.hmget(self.keys.session, "v", "i", "r", "j")
            if ids:
                pipe.zmscore(self.keys.ids, list(ids))
            found = pipe.execute()
            v, i, r, j = found[0]
            self._scores = dict(zip(ids, found[1], strict=True)) if ids else {}
            self.token = (_s(v), _s(i), _s(r))
            self.session = None if j is None else SESSION_DECODER.decode(j)
        self.pending: tuple[list[Row], dict[str, int], tuple[int, int] | None, Session,
                            dict[str, tuple[bytes, str]]] | None = None

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        if all(i in self._scores for i in ids):  # read with the session (none asked: none)
            scores = [self._scores[i] for i in ids]
        else:
            scores = self.store._r.zmscore(self.keys.ids, list(ids))
        found = {i: int(s) for i, s in zip(ids, scores, strict=True) if s is not None}
        if not found:
            return {}
        values = self.store._r.hmget(self.keys.rows, [str(s) for s in found.values()])
        return {i: unpack_row(s, v).version
                for (i, s), v in zip(found.items(), values, strict=True) if v is not None}

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        scores = self.store._r.zmscore(self.keys.calls, list(call_ids)) if call_ids else []
        return {c: int(s) for c, s in zip(call_ids, scores, strict=True) if s is not None}

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        self.pending = (rows, calls, clear, session, assets)

    def commit(self) -> bool:
        """Write the buffered append if the session did not change; False on a race."""
        assert self.pending is not None
        rows, calls, clear, session, assets = self.pending
        v, i, r = self.token
        store = self.store
        if assets:  # tenant slot first: the reference exists before any row uses the asset
            tk = store._tenant_key
            pipe = store._r.pipeline(transaction=False)
            for sha, (data, mime) in assets.items():
                pipe.sadd(tk(self.tenant, f"refs:{sha}"), index_member(r, self.session_id))
                pipe.hsetnx(tk(self.tenant, "assets"), sha, data)
                pipe.hsetnx(tk(self.tenant, "asset_types"), sha, mime)
            pipe.execute()
        lo, hi = clear or (0, 0)
        args: list[Any] = [v, i, r, msgspec.json.encode(session), session.version, lo, hi,
                           len(rows), len(calls), len(assets)]
        for row in rows:
            args += [row.seq, row.id, row.cum_before, int(row.role in KEPT_ROLES), pack_row(row)]
        for call_id, seq in calls.items():
            args += [call_id, seq]
        args += list(assets)
        k = self.keys
        keys = [k.session, k.rows, k.ids, k.cum, k.kept, k.calls, k.refs]
        if store.cluster:  # the recent-order sets are in other slots: in steps around it
            done = store._saving(self.session, session,
                                 lambda: store._append_script(keys=keys, args=args) == 1)
        else:
            before = "" if self.session is None else recent_member(self.session)
            done = store._append_combined(keys + store._recent_keys(session),
                                          [*args, recent_member(session), before]) == 1
        if done:
            key = (self.tenant, self.session_id)
            store._remember(key, ((str(session.version), i, r), session))
            store._keep_length(key, session.message_count)
        return done


class RedisStore(RedisSearch, BaseStore):
    """A store in Redis (``redis://host:port/db``) or Redis Cluster
    (``redis+cluster://host:port`` or ``?cluster=true``).

    ``prefix`` starts every key (operator-chosen, checked against a strict
    pattern); ``flush_prefix_on_close`` deletes its keys on ``close()`` (SCAN and
    DEL, never FLUSHDB), for tests. An unreachable server fails within
    ``socket_connect_timeout``, a silent one within ``socket_timeout``.
    ``search`` (URL ``?search=off``) is accepted as the SQL stores accept it and
    changes nothing: Redis has no search index to turn off, a search always scans
    (at most ``search_scan_limit`` rows; ``search.py`` in this package).
    """

    def __init__(self, url: str, counter: str | TokenCounter | None = None, *,
                 prefix: str = "chathistory", flush_prefix_on_close: bool = False,
                 cluster: bool | None = None, socket_connect_timeout: float = 3.0,
                 socket_timeout: float | None = 10.0, search: bool = True) -> None:
        super().__init__(counter)
        try:
            import redis
            import redis.cluster
        except ImportError:
            raise MissingDependency("redis", "redis") from None
        if not PREFIX_PATTERN.match(prefix):
            raise ValueError(f"prefix must match {PREFIX_PATTERN.pattern}, got {prefix!r}")
        self.prefix = prefix
        self.flush_prefix_on_close = flush_prefix_on_close
        url, from_url = _parse_url(url)
        self.cluster = from_url if cluster is None else cluster
        self._written: dict[tuple[str, str], _Written] = {}
        self._lengths: dict[tuple[str, str], int] = {}
        # Any: redis-py's command methods are typed for sync and async clients at once
        self._r: Any
        timeouts = {"socket_connect_timeout": socket_connect_timeout,
                    "socket_timeout": socket_timeout}
        if self.cluster:
            self._r = redis.cluster.RedisCluster.from_url(url, **timeouts)
        else:
            self._r = redis.Redis.from_url(url, **timeouts)
            self._r.ping()  # fail fast on an unreachable server
        self._append_script = self._r.register_script(scripts.APPEND)
        # the hot commands past redis-py's dispatch (one node; None for a cluster)
        self._direct = None if self.cluster else Direct.of(self._r)
        # appends that threads make while one is in flight share a round trip (one node)
        self._append_combined = ScriptCombiner(self._r, self._append_script,
                                               redis.exceptions.NoScriptError, self._direct)
        self._truncate_script = self._r.register_script(scripts.TRUNCATE)
        self._rewrite_script = self._r.register_script(scripts.REWRITE)
        self._hold_script = self._r.register_script(scripts.HOLD)
        self._release_script = self._r.register_script(scripts.RELEASE)
        self._insert_script = self._r.register_script(scripts.INSERT)
        self._save_script = self._r.register_script(scripts.SAVE)
        self._probe_script = self._r.register_script(scripts.PROBE)
        self._tail_script = self._r.register_script(scripts.TAIL_PROBE)
        self._script_error = redis.exceptions.ResponseError
        self._status_script = self._r.register_script(scripts.SET_STATUS)
        self._gc_script = self._r.register_script(scripts.GC)
        self._fix_expiry_script = self._r.register_script(scripts.FIX_EXPIRY)
        self._migrate()

    def _migrate(self) -> None:
        """Apply the data steps this prefix lacks. Safe to run from several processes at
        once: a step only clears flags that must be clear."""
        done_key = f"{self.prefix}:migrations"
        done = {_s(m) for m in self._r.smembers(done_key)}
        if "m003_regroup" not in done:
            self._regroup()
            self._r.sadd(done_key, "m003_regroup")

    def _regroup(self) -> None:
        """Clear the group-start flags that a batch append of earlier releases left set
        (a result joined the batch's earlier messages to its call only in memory)."""
        clear = self._r.register_script(scripts.CLEAR_CUTS)
        for raw in self._r.smembers(f"{self.prefix}:tenants"):
            tenant = _s(raw)
            sids = [_s(m).partition("\x00")[2] for m in
                    self._r.zrange(self._list_key(tenant, None), 0, -1)]
            sessions = {(tenant, found[2].id): found[2]
                        for found in self._load(tenant, sids) if found is not None}

            def rows_of(key: tuple[str, str]) -> list[tuple[int, bytes]]:
                rows = self._r.hgetall(self._keys(*key).rows)
                out = [(int(seq), unpack_row(int(seq), value).data) for seq, value in rows.items()
                       if seq != b"j" and b'"tool_result"' in value]
                return sorted(out)

            def calls_of(key: tuple[str, str]) -> dict[str, int]:
                return {_s(c): int(seq) for c, seq in
                        self._r.zrange(self._keys(*key).calls, 0, -1, withscores=True)}

            for key, lo, hi in regroup_spans(sessions, rows_of, calls_of):
                clear(keys=[self._keys(*key).rows], args=[lo, hi])

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """A store for ``redis://``, ``rediss://``, ``redis+cluster://`` URLs; a
        ``prefix=`` query parameter sets the key prefix, ``search=`` is accepted as the
        SQL stores accept it (``search_option``) and changes nothing (see the class)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        if "search" in query:
            options.setdefault("search", search_option(query.pop("search")))
        if "prefix" in query:
            options.setdefault("prefix", query.pop("prefix"))
        if "search" in options or "prefix" in options:
            url = urlunsplit(parts._replace(query=urlencode(query)))
        return cls(url, **options)

    def close(self) -> None:
        """Delete this prefix's keys when asked to (tests), then disconnect."""
        if self.flush_prefix_on_close:
            batch: list[bytes] = []
            for key in self._r.scan_iter(match=f"{self.prefix}:*", count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    self._r.delete(*batch)
                    batch.clear()
            if batch:
                self._r.delete(*batch)
        if self._direct is not None:
            self._direct.close()
        self._r.close()

    # ================================================================ sessions

    def _load(self, tenant: str, session_ids: Sequence[str]
              ) -> list[tuple[str, str, Session] | None]:
        """(incarnation, epoch, session) of each id, None for the missing ones."""
        pipe = self._r.pipeline(transaction=False)
        for sid in session_ids:
            pipe.hmget(self._keys(tenant, sid).session, "i", "r", "j")
        out: list[tuple[str, str, Session] | None] = []
        for i, r, j in pipe.execute() if session_ids else []:
            out.append(None if j is None else (_s(i), _s(r), SESSION_DECODER.decode(j)))
        return out

    def _b_insert_session(self, session: Session) -> None:
        inc, epoch = uuid.uuid4().hex, uuid.uuid4().hex
        entries = self._index_entries(session, inc)
        pipe = self._r.pipeline(transaction=False)
        pipe.sadd(f"{self.prefix}:tenants", session.tenant)
        for kind, key, member, score in entries:  # index first: a crash leaves stale entries
            if kind == "z":
                pipe.zadd(key, {member: score}, nx=True)
            else:
                pipe.sadd(key, member)
        added = pipe.execute()[1:]
        k = self._keys(session.tenant, session.id)
        keys = [k.session, k.rows]
        if self._insert_script(keys=keys, args=[session.version, inc, epoch,
                                                msgspec.json.encode(session)]):
            return
        pipe = self._r.pipeline(transaction=False)
        for (kind, key, member, _), new in zip(entries, added, strict=True):
            if new:  # only what this call added: the existing session keeps its entries
                (pipe.zrem if kind == "z" else pipe.srem)(key, member)
        pipe.execute()
        raise Conflict(f"session {session.id!r} exists")

    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        j = self._r.hget(self._keys(tenant, session_id).session, "j")
        return None if j is None else SESSION_DECODER.decode(j)

    def _b_save_session(self, session: Session, expected_version: int) -> bool:
        self._written.pop((session.tenant, session.id), None)
        k = self._keys(session.tenant, session.id)
        key = k.session
        inc, j = self._r.hmget(key, "i", "j")
        if j is None:
            return False
        if session.expires_at is not None:
            # before the save, and only ever lowered: the index is never later than the TTL
            self._r.zadd(self._tenant_key(session.tenant, "expiry"),
                         {index_member(_s(inc), session.id): session.expires_at.timestamp()},
                         lt=True)
        args = [expected_version, session.version, msgspec.json.encode(session)]
        return self._saving(SESSION_DECODER.decode(j), session,
                            lambda: bool(self._save_script(keys=[key, k.rows], args=args)))

    def _saving(self, old: Session | None, new: Session, write: Callable[[], bool]) -> bool:
        """Run ``write`` (saving ``new`` over ``old``) with the recent-order entries in
        step: the new entry before it, the old one removed after (crash: a stale entry,
        never a missing one)."""
        member = recent_member(new)
        before = None if old is None else recent_member(old)
        if before == member:
            return write()
        keys = self._recent_keys(new)
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            pipe.zadd(key, {member: 0.0})
        pipe.execute()
        saved = write()
        gone = before
        if not saved:  # ours is stale, unless a save that won has the very same time
            current = self._b_get_session(new.tenant, new.id)
            gone = None if current is not None and recent_member(current) == member else member
        if gone is not None:
            pipe = self._r.pipeline(transaction=False)
            for key in keys:
                pipe.zrem(key, gone)
            pipe.execute()
        return saved

    def _b_list_sessions(self, tenant: str, after: tuple[str, str] | None, limit: int,
                         user: str | None, *, recent: bool = False) -> list[Session]:
        if recent:
            key = self._recent_key(tenant, user)
            start = "+" if after is None else f"({after[0]}\x00{after[1]}"
        else:
            key = self._list_key(tenant, user)
            start = "-" if after is None else f"({after[0]}\x00{after[1]}"
        out: list[Session] = []
        while len(out) < limit:
            if recent:
                found_members = self._r.zrevrangebylex(key, start, "-", 0, limit)
            else:
                found_members = self._r.zrangebylex(key, start, "+", 0, limit)
            members = [_s(m) for m in found_members]
            if not members:
                break
            pairs = [m.partition("\x00") for m in members]
            loaded = self._load(tenant, [sid for _, _, sid in pairs])
            for (stamp, _, _), found in zip(pairs, loaded, strict=True):
                if found is None or (user is not None and found[2].user != user):
                    continue  # a stale entry: filtered out
                actual = recent_key(found[2]) if recent else found[2].created_at.isoformat()
                if actual == stamp:
                    out.append(found[2])
            if len(members) < limit:
                break
            start = "(" + members[-1]
        return out[:limit]

    def _b_count_sessions(self, tenant: str, user: str | None, now: datetime) -> int:
        # the listing set's size, less its expired sessions (the expiry set holds them all,
        # usually few: each is read to check its incarnation and its user)
        pipe = self._r.pipeline(transaction=False)
        pipe.zcard(self._list_key(tenant, user))
        pipe.zrangebyscore(self._tenant_key(tenant, "expiry"), "-inf", now.timestamp())
        listed, due = pipe.execute()
        members = [_s(m).partition("|") for m in due]
        loaded = self._load(tenant, [sid for _, _, sid in members])
        expired = sum(1 for (inc, _, _), found in zip(members, loaded, strict=True)
                      if found is not None and found[0] == inc and found[2].is_expired(now)
                      and (user is None or found[2].user == user))
        return int(listed) - expired

    def _b_first_user_rows(self, tenant: str, spans: Sequence[Span]) -> list[Row | None]:
        found = self._scan_spans(tenant, spans, lambda row: row.role == "user", 1, batch=8)
        return [rows[0] if rows else None for rows in found]

    def _scan_spans(self, tenant: str, spans: Sequence[Span], keep: Callable[[Row], bool],
                    limit: int, *, batch: int) -> list[list[Row]]:
        """For each span, its first ``limit`` rows that ``keep`` accepts, read in seq order
        a batch at a time (growing), every span's batch in one round trip."""
        out: list[list[Row]] = [[] for _ in spans]
        pending = {i: lo for i, (_, lo, hi) in enumerate(spans) if lo < hi}
        while pending:
            pipe = self._r.pipeline(transaction=False)
            for i, at in pending.items():
                session_id, _, hi = spans[i]
                pipe.hmget(self._keys(tenant, session_id).rows,
                           [str(seq) for seq in range(at, min(at + batch, hi))])
            for (i, at), values in zip(list(pending.items()), pipe.execute(), strict=True):
                for offset, value in enumerate(values):
                    if value is not None and keep(row := unpack_row(at + offset, value)):
                        out[i].append(row)
                        if len(out[i]) == limit:
                            break
                if len(out[i]) == limit or at + batch >= spans[i][2]:
                    del pending[i]
                else:
                    pending[i] = at + batch
            batch = min(batch * 4, _CHUNK)
        return out

    def _members(self, tenant: str, name: str, keep: Callable[[Session], bool]
                 ) -> list[Session]:
        members = [_s(m).partition("|") for m in self._r.smembers(self._tenant_key(tenant, name))]
        loaded = self._load(tenant, [sid for _, _, sid in members])
        return [found[2] for (inc, _, _), found in zip(members, loaded, strict=True)
                if found is not None and found[0] == inc and keep(found[2])]

    def _b_children(self, tenant: str, session_id: str) -> list[Session]:
        return self._members(tenant, f"children:{escape(session_id)}",
                             lambda s: s.parent_id == session_id)

    def _b_tree(self, tenant: str, root_id: str) -> list[Session]:
        return self._members(tenant, f"tree:{escape(root_id)}",
                             lambda s: (s.root_id or s.id) == root_id)

    def _b_delete_session(self, tenant: str, session_id: str) -> None:
        self._written.pop((tenant, session_id), None)
        keys = self._keys(tenant, session_id)
        pipe = self._r.pipeline(transaction=False)
        pipe.hmget(keys.session, "i", "r", "j")
        pipe.smembers(keys.refs)
        (inc, epoch, j), shas = pipe.execute()
        if j is None:
            return
        self._r.delete(*keys)  # one slot: the session goes at once; its index entries after
        session = SESSION_DECODER.decode(j)
        pipe = self._r.pipeline(transaction=False)
        for kind, key, member, _ in self._index_entries(session, _s(inc)):
            (pipe.zrem if kind == "z" else pipe.srem)(key, member)
        for sha in shas:
            pipe.srem(self._tenant_key(tenant, f"refs:{_s(sha)}"),
                      index_member(_s(epoch), session_id))
        pipe.execute()

    # ================================================================ messages

    def _b_append(self, tenant: str, session_id: str, fn: Callable[[_Txn], T],
                  ids: Sequence[str] = ()) -> T:
        written = self._written.pop((tenant, session_id), None)
        if written is not None:
            result = self._append_as_written(tenant, session_id, fn, ids, written)
            if result is not _MISSED:
                return result  # type: ignore[return-value]
        deadline = time.monotonic() + 30.0
        attempt = 0
        while True:
            tx = _Txn(self, tenant, session_id, ids)
            result = fn(tx)
            if tx.pending is None or tx.commit():
                return result
            attempt += 1
            if time.monotonic() > deadline:
                raise Conflict(f"session {session_id!r} kept changing; try again")
            time.sleep(random.uniform(0, min(0.05, 0.0005 * 2 ** min(attempt, 7))))

    def _append_as_written(self, tenant: str, session_id: str, fn: Callable[[_Txn], T],
                           ids: Sequence[str], written: _Written) -> T | object:
        """One round trip: plan on the session as this process last wrote it, taking
        none of the batch's ids to be stored; APPEND writes only if the session is
        still at that version, incarnation and epoch and none of the ids is taken.
        ``_MISSED`` when that cannot be known here: another writer moved the session,
        the append is a retry of a stored one, the session is a fork (its ancestors'
        ids are read the long way), or the plan raised (it may have read the stale
        copy). The long way reads the session and the ids first (two round trips).

        Worth its code (issue 18, ``python -m bench writes --cells redis_threads``):
        see bench/README.md's "Fast paths kept". ``test_redis`` checks it against the
        long way: the same random operations give the same answers and rows."""
        if written[1].parent_id is not None:
            return _MISSED
        tx = _Txn(self, tenant, session_id, ids, written)
        try:
            result = fn(tx)
        except ChatHistoryError:
            return _MISSED
        if tx.pending is None or not tx.commit():
            return _MISSED
        return result

    def _remember(self, key: tuple[str, str], written: _Written) -> None:
        """Keep the session as this append wrote it, for the next append's plan."""
        keep_bounded(self._written, key, written, _WRITTEN_SESSIONS)

    def _rows_at(self, tenant: str, session_id: str, seqs: Sequence[int]) -> list[Row]:
        key = self._keys(tenant, session_id).rows
        if len(seqs) <= _CHUNK:
            values = self._hmget(key, [str(s) for s in seqs]) if seqs else []
        else:
            pipe = self._r.pipeline(transaction=False)
            for a in range(0, len(seqs), _CHUNK):
                pipe.hmget(key, [str(s) for s in seqs[a:a + _CHUNK]])
            values = [v for chunk in pipe.execute() for v in chunk]
        return [unpack_row(s, v) for s, v in zip(seqs, values, strict=True) if v is not None]

    def _b_rows(self, tenant: str, session_id: str, lo: int, hi: int) -> list[Row]:
        # own rows are contiguous positions, so a range is one HMGET of its fields
        return self._rows_at(tenant, session_id, range(max(0, lo), hi))

    def _scripted(self, script: Any, keys: list[Any], args: list[Any]) -> Any:
        """``script(keys=keys, args=args)``, past redis-py's dispatch on one node
        (``wire.Direct``; a server that lost the script gets it from the ``Script``)."""
        return run_script(self._direct, script, keys, args)

    def _hmget(self, key: str, fields: list[str]) -> list[Any]:
        """``HMGET``, past redis-py's dispatch on one node (``wire.Direct``)."""
        if self._direct is None:
            return list(self._r.hmget(key, fields))
        return list(self._direct.call(("HMGET", key, *fields)))

    def _b_window_probe(self, tenant: str, session_id: str, budget: int
                        ) -> tuple[Session | None, list[Row]] | None:
        k = self._keys(tenant, session_id)
        try:
            found = self._scripted(self._probe_script, [k.session, k.rows, k.cum],
                                   [budget, scripts.PROBE_ROWS])
        except self._script_error:  # a session JSON that Lua's cjson cannot read: step by step
            return None
        return _probed(found)

    def _b_tail_probe(self, tenant: str, session_id: str, rows: int
                      ) -> tuple[Session | None, list[Row]] | None:
        k = self._keys(tenant, session_id)
        rows = min(rows, scripts.PROBE_ROWS)
        key = (tenant, session_id)
        length = self._lengths.get(key)
        if length is not None:
            probed = self._tail_at(k, length, rows)
            if probed is not None:
                return probed
        try:
            found = self._scripted(self._tail_script, [k.session, k.rows], [rows])
        except self._script_error:  # a session JSON that Lua's cjson cannot read: step by step
            return None
        probed = _probed(found)
        if probed[0] is not None:
            self._keep_length(key, probed[0].message_count)
        return probed

    def _tail_at(self, k: SessionKeys, length: int, rows: int
                 ) -> tuple[Session | None, list[Row]] | None:
        """The tail probe without a script, for a session whose length this process
        saw last: the session (the rows hash's copy of its JSON) and the newest ``rows``
        rows of that length, in one HMGET (so both are of one moment). None when the
        session has another length now, or no copy (the script then reads it). A HMGET
        of 21 rows costs the server 1.4 us, the same rows read inside a Lua script
        30-35 us (Lua copies every value in and out); a MULTI around two commands costs
        the client 15 us more than one command."""
        lo = max(0, length - rows)
        j, *values = self._hmget(k.rows, ["j", *map(str, range(lo, length))])
        if j is None:  # no session, or one last written by an older release: the script
            return None
        session = SESSION_DECODER.decode(j)
        if session.message_count != length:
            return None
        return session, [unpack_row(lo + i, v) for i, v in enumerate(values) if v is not None]

    def _keep_length(self, key: tuple[str, str], length: int) -> None:
        """Remember a session's length as this process last saw it (a tail read's guess)."""
        keep_bounded(self._lengths, key, length, _WRITTEN_SESSIONS)

    def _b_seq_at_cum(self, tenant: str, session_id: str, cum: int) -> int | None:
        found = self._r.zrangebyscore(self._keys(tenant, session_id).cum, cum, "+inf", 0, 1)
        return int(found[0]) if found else None

    def _b_kept_rows(self, tenant: str, session_id: str, hi: int) -> list[Row]:
        seqs = self._r.zrangebyscore(self._keys(tenant, session_id).kept, "-inf", f"({hi}")
        return self._rows_at(tenant, session_id, [int(s) for s in seqs])

    def _b_row_by_id(self, tenant: str, session_id: str, message_id: str) -> Row | None:
        seq = self._r.zscore(self._keys(tenant, session_id).ids, message_id)
        rows = [] if seq is None else self._rows_at(tenant, session_id, [int(seq)])
        return rows[0] if rows else None

    def _b_find_calls(self, tenant: str, session_id: str, call_ids: Sequence[str],
                      hi: int) -> dict[str, int]:
        if not call_ids:
            return {}
        scores = self._r.zmscore(self._keys(tenant, session_id).calls, list(call_ids))
        return {c: int(s) for c, s in zip(call_ids, scores, strict=True)
                if s is not None and s < hi}

    def _b_set_status(self, tenant: str, session_id: str, seqs: Sequence[int], status: int,
                      overrides: Sequence[int]) -> None:
        keys = self._keys(tenant, session_id)
        self._status_script(keys=[keys.rows, keys.over],
                            args=[status, len(seqs), *seqs, *overrides])

    def _b_overrides(self, tenant: str, session_id: str) -> dict[int, int]:
        found = self._r.hgetall(self._keys(tenant, session_id).over)
        return {int(k): int(v) for k, v in found.items()}

    def _b_truncate(self, tenant: str, session_id: str, seq: int, session: Session,
                    expected_version: int, restore: Sequence[int] = ()) -> bool:
        self._written.pop((tenant, session_id), None)
        k = self._keys(tenant, session_id)
        keys = [k.session, k.rows, k.ids, k.cum, k.kept, k.calls, k.over, k.refs]
        args = [expected_version, seq, session.version, msgspec.json.encode(session),
                uuid.uuid4().hex,  # a new asset-ref epoch when every row goes
                *(str(at) for at in restore)]
        old = self._b_get_session(tenant, session_id)
        if old is None:
            return False
        return self._saving(old, session,
                            lambda: bool(self._truncate_script(keys=keys, args=args)))

    @contextmanager
    def _b_held(self, tenant: str, session_id: str) -> Iterator[None]:
        key = self._keys(tenant, session_id).session
        deadline = time.monotonic() + 30.0
        attempt = 0
        while (token := self._hold_script(keys=[key], args=[_HOLD_MS])) == 0:
            attempt += 1
            if time.monotonic() > deadline:
                raise Conflict(f"session {session_id!r} kept changing; try again")
            time.sleep(random.uniform(0, min(0.05, 0.0005 * 2 ** min(attempt, 7))))
        try:
            yield
        finally:
            if token != -1:
                self._release_script(keys=[key], args=[token])

    def _b_rewrite_from(self, tenant: str, session_id: str, seq: int, rows: Sequence[Row],
                        calls: dict[str, int], session: Session, expected_version: int
                        ) -> bool:
        self._written.pop((tenant, session_id), None)
        k = self._keys(tenant, session_id)
        args: list[Any] = [expected_version, seq, session.version, msgspec.json.encode(session),
                           len(rows), len(calls)]
        for row in rows:
            args += [row.seq, row.id, row.cum_before, int(row.role in KEPT_ROLES), pack_row(row)]
        for call_id, at in calls.items():
            args += [call_id, at]
        old = self._b_get_session(tenant, session_id)
        if old is None:
            return False
        keys = [k.session, k.rows, k.ids, k.cum, k.kept, k.calls]
        return self._saving(old, session,
                            lambda: bool(self._rewrite_script(keys=keys, args=args)))

    # ================================================================ assets and retention

    def _b_get_asset(self, tenant: str, sha256: str) -> bytes | None:
        data: bytes | None = self._r.hget(self._tenant_key(tenant, "assets"), sha256)
        return data

    def _b_gc_assets(self, tenant: str) -> int:
        shas = [_s(s) for s in self._r.hkeys(self._tenant_key(tenant, "assets"))]
        removed = 0
        for a in range(0, len(shas), 200):
            chunk = shas[a:a + 200]
            pipe = self._r.pipeline(transaction=False)
            for sha in chunk:
                pipe.smembers(self._tenant_key(tenant, f"refs:{sha}"))
            refs = [sorted(_s(m) for m in ms) for ms in pipe.execute()]
            sids = sorted({m.partition("|")[2] for ms in refs for m in ms})
            epochs = {sid: None if f is None else f[1]
                      for sid, f in zip(sids, self._load(tenant, sids), strict=True)}
            # a reference is live while its session exists with the same epoch; an append
            # in flight holds the current epoch, so its reference is never taken for stale
            keys = [self._tenant_key(tenant, "assets"), self._tenant_key(tenant, "asset_types")]
            args: list[str | int] = []
            for sha, members in zip(chunk, refs, strict=True):
                stale = [m for m in members if epochs[m.partition("|")[2]]
                         != m.partition("|")[0]]
                if len(stale) == len(members):
                    keys.append(self._tenant_key(tenant, f"refs:{sha}"))
                    args += [sha, len(stale), *stale]
            if len(keys) > 2:
                removed += int(self._gc_script(keys=keys, args=args))
        return removed

    def _b_expired(self, now: datetime) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for raw in self._r.smembers(f"{self.prefix}:tenants"):
            tenant = _s(raw)
            key = self._tenant_key(tenant, "expiry")
            due = [(_s(m), score) for m, score in
                   self._r.zrangebyscore(key, "-inf", now.timestamp(), withscores=True)]
            sids = [m.partition("|")[2] for m, _ in due]
            for (member, score), found in zip(due, self._load(tenant, sids), strict=True):
                if found is None or found[0] != member.partition("|")[0]:
                    self._r.zrem(key, member)  # that incarnation is gone for good
                elif found[2].is_expired(now):
                    out.append((tenant, found[2].id))
                else:  # the TTL was extended: move the entry, unless it changed meanwhile
                    expires = found[2].expires_at
                    self._fix_expiry_script(keys=[key], args=[
                        member, repr(score), "" if expires is None else repr(expires.timestamp())])
        return out

    def _b_clock(self) -> datetime:
        """Redis's ``TIME``: every process judges TTLs by the server's clock."""
        seconds, micros = self._r.time()
        return datetime.fromtimestamp(int(seconds), UTC) + timedelta(microseconds=int(micros))


def _parse_url(url: str) -> tuple[str, bool]:
    """The URL redis-py understands, and whether it names a cluster."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    cluster = scheme.endswith("+cluster")
    if cluster:
        scheme = scheme.removesuffix("+cluster")
    if scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"not a Redis URL: {url!r}")
    query = parse_qsl(parts.query)
    flags = [v for k, v in query if k == "cluster"]
    if flags:
        cluster = cluster or flags[-1].lower() in ("1", "true", "yes")
        query = [(k, v) for k, v in query if k != "cluster"]
    return urlunsplit(parts._replace(scheme=scheme, query=urlencode(query))), cluster



def _probed(found: list[Any] | None) -> tuple[Session | None, list[Row]]:
    """A probe script's answer: the session and the rows from the position it names."""
    if not found:
        return None, []
    j, lo, *values = found
    first = int(lo)
    return (SESSION_DECODER.decode(j),
            [unpack_row(first + i, v) for i, v in enumerate(values) if v is not None])
