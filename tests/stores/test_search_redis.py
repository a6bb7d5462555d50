"""Search on RedisStore (issue 22), what is specific to it: the scan's bound (the
tenant's newest rows are read, the oldest not, ``SearchPage.scanned`` says how many),
the same hits as decoding every row (the byte test and pipelined reads are a fast path), a
search that Redis itself refuses to let out of its tenant (an ACL user limited to the
tenant's keys), the session list's matching through the same scan, the URL's
``search=`` option, and the search contract again on a Redis Cluster."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
import test_redis
import test_search_contract as contract  # the contract's functions, rerun on a cluster
from test_redis import REDIS_URL

from chathistory import Message
from chathistory.model import ToolCall, ToolResult
from chathistory.stores import open_store
from chathistory.stores.backend import own_span
from chathistory.stores.model import MESSAGE_DECODER
from chathistory.stores.redis import RedisStore
from chathistory.stores.redis.keys import escape
from chathistory.stores.redis.search import CANDIDATE_COST, SCAN_LIMIT
from chathistory.stores.search import parse_query, rank_key, search_text, words

redis = pytest.importorskip("redis")
# the fixtures: a cluster, a store on it (overriding the conftest ``store``, so the
# contract's functions below run on the cluster), a store on the test server
cluster_url, store, redis_store = test_redis.cluster_url, test_redis.store, test_redis.redis_store


for _name in dir(contract):
    if _name.startswith("test_") and "store" in contract.__dict__[_name].__code__.co_varnames:
        globals()[f"test_cluster_{_name[5:]}"] = getattr(contract, _name)


def _fill(store: RedisStore, session_id: str, texts: list[str]) -> list[Message]:
    store.create_session(session_id)
    messages = [Message.user(t) for t in texts]
    store.append(session_id, messages)
    return messages


# ---------------------------------------------------------------- the bound


def test_the_default_bound_is_the_documented_one(redis_store: RedisStore) -> None:
    assert redis_store.search_scan_limit == SCAN_LIMIT == 20_000


def test_the_scan_reads_the_newest_rows_up_to_its_bound(redis_store: RedisStore) -> None:
    # sessions written oldest first: the recent order reads new, then mid, then old
    _fill(redis_store, "old", [f"old filler {k}" for k in range(30)])
    _fill(redis_store, "mid", [f"mid filler {k} kiwi{k}" for k in range(30)])
    _fill(redis_store, "new", [f"new filler {k}" for k in range(30)])
    redis_store.search_scan_limit = 50  # new's 30 rows, then mid's newest 20 (seq 29..10)
    page = redis_store.search("nothingmatches")
    assert page.items == [] and page.scanned == 50
    assert redis_store.search("old").items == []  # never read
    assert [h.seq for h in redis_store.search("kiwi10").items] == [10]
    assert redis_store.search("kiwi9").items == []  # mid's seq 9: past the bound
    assert redis_store.search("kiwi9").scanned == 50
    redis_store.search_scan_limit = None  # unbounded: everything, as the reference
    page = redis_store.search("filler", limit=100)
    assert page.scanned == 90 and len(page.items) == 90


def test_a_decoded_row_counts_as_candidate_cost_rows(redis_store: RedisStore) -> None:
    _fill(redis_store, "s", [f"kiwi {k}" for k in range(10)])
    redis_store.search_scan_limit = 2 * (1 + CANDIDATE_COST) + 1
    page = redis_store.search("kiwi")
    # each row passes the byte test and is decoded: 1 + CANDIDATE_COST each, so three
    assert page.scanned == 3
    assert sorted(h.seq for h in page.items) == [7, 8, 9]


def test_the_bound_holds_within_one_session_too(redis_store: RedisStore) -> None:
    _fill(redis_store, "s", [f"row {k} plum" if k == 0 else f"row {k}" for k in range(40)])
    redis_store.search_scan_limit = 39
    page = redis_store.search("plum", session_id="s")
    assert page.items == [] and page.scanned == 39
    redis_store.search_scan_limit = 40
    assert [h.seq for h in redis_store.search("plum", session_id="s").items] == [0]


# ---------------------------------------------------------------- the fast path


def test_the_scan_finds_what_decoding_every_row_finds(redis_store: RedisStore) -> None:
    """The fast path (byte test, pipelined reads, newest first) against the plainest
    scan: every row of every session decoded and matched, unbounded: the same hits,
    scores and rows read, for every query shape."""
    rng = random.Random(7)
    vocab = [*contract.VOCAB, "\uff26\uff4f\uff4f", "ﬁx", "1.5e-05", "tool_call"]
    for s in range(8):
        texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 9)))
                 for _ in range(rng.randint(1, 40))]
        _fill(redis_store, f"s{s}", texts)
    redis_store.append("s0", [
        Message(role="assistant", parts=[ToolCall(id="c9", name="get_it",
                                                  arguments={"n": 1.5e-05, "city": "Köln"})]),
        Message(role="tool", parts=[ToolResult(call_id="c9", content="koln 05")])])
    rows = [(s.id, row) for s in redis_store.list_sessions(limit=100).items
            for row in redis_store._b_rows("default", s.id, 0, s.message_count)]
    redis_store.search_scan_limit = None
    for q in ["alpha", "cafe", "uber bravo", '"alpha bravo"', "ca*", "foo", "fix", "05",
              "5e", "koln", "nothing", "x1 2024", "tool call", "naive*"]:
        parsed = parse_query(q)
        fast, read = redis_store._scan_search("default", parsed, None, None, None, 1000)
        plain = []
        for session_id, row in rows:
            got = words(search_text(MESSAGE_DECODER.decode(row.data)))
            if parsed.matches(got):
                plain.append((parsed.score(got), session_id, row.seq, row))
        assert fast == sorted(plain, key=rank_key), q
        assert read == len(rows)


# ---------------------------------------------------------------- scope


@pytest.fixture
def acl_user(redis_store: RedisStore) -> Iterator[tuple[str, str]]:
    """A Redis user who may touch only tenant t1's keys of the store's prefix (and the
    prefix's two global sets the store reads when it opens)."""
    name = f"search-t1-{uuid.uuid4().hex[:8]}"
    p = redis_store.prefix
    redis_store._r.acl_setuser(name, enabled=True, nopass=True, categories=["+@all"],
                               keys=[f"{p}:{{t1}}:*", f"{p}:{{t1:*", f"{p}:migrations",
                                     f"{p}:tenants"])
    try:
        yield name, p
    finally:
        redis_store._r.acl_deluser(name)


def test_redis_refuses_every_key_of_another_tenant_to_a_search(
        redis_store: RedisStore, acl_user: tuple[str, str]) -> None:
    name, prefix = acl_user
    for tenant in ("t1", "t2", "t10"):  # t10: a tenant whose name starts with t1
        redis_store.create_session("a", tenant=tenant, user="ann")
        redis_store.append("a", [Message.user(f"mango in {tenant}")], tenant=tenant)
        redis_store.create_session("b", tenant=tenant)
        redis_store.append("b", [Message.user(f"mango again in {tenant}")], tenant=tenant)
    url = REDIS_URL.replace("redis://", f"redis://{name}:x@", 1)
    limited = RedisStore(url, counter="approx", prefix=prefix)
    try:
        assert {h.message.text for h in limited.search("mango", tenant="t1").items} == {
            "mango in t1", "mango again in t1"}
        assert [h.session_id for h in limited.search("mango", tenant="t1", user="ann").items
                ] == ["a"]
        assert len(limited.search("mango", tenant="t1", session_id="b").items) == 1
        assert limited.sessions_matching("t1", parse_query("again"), [("a", 0, 1), ("b", 0, 1)]
                                         ) == {"b"}
        with pytest.raises(redis.exceptions.NoPermissionError):  # the ACL holds
            limited.search("mango", tenant="t2")
    finally:
        limited.close()
    assert escape("t1") == "t1"  # the patterns above name the tenant's tags verbatim


# ---------------------------------------------------------------- the session list


def test_sessions_matching_reads_own_rows_through_the_scan(redis_store: RedisStore) -> None:
    first = _fill(redis_store, "a", ["apple pie", "banana split"])[0]
    _fill(redis_store, "b", ["cherry tart"])
    _fill(redis_store, "c", [f"filler {k}" for k in range(600)] + ["banana bread"])
    redis_store.fork("a", first.id, new_session_id="fork")  # inherits "apple pie" only
    redis_store.append("fork", [Message.user("durian")])
    def match(query: str, ids: list[str]) -> set[str]:
        spans = [own_span(redis_store.get_session(sid)) for sid in ids]
        return redis_store.sessions_matching("default", parse_query(query), spans)

    assert match("banana", ["a", "b", "c", "fork"]) == {"a", "c"}
    assert match("apple", ["a", "fork"]) == {"a"}  # own rows only: the fork's start after them
    assert match("durian", ["a", "fork"]) == {"fork"}
    assert redis_store._b_search_sessions("default", parse_query("pie"), None, 10) is None


# ---------------------------------------------------------------- the URL option


def test_search_off_is_accepted_and_changes_nothing(redis_store: RedisStore) -> None:
    _fill(redis_store, "s", ["guava"])
    for value in ("off", "on", "false", "1", "NO"):  # as the SQL stores accept them
        s = open_store(f"{REDIS_URL}?search={value}&prefix={redis_store.prefix}",
                       counter="approx")
        try:
            page = s.search("guava")  # type: ignore[attr-defined]
            assert [h.message.text for h in page.items] == ["guava"] and page.scanned == 1
        finally:
            s.close()
    with pytest.raises(ValueError, match="search must be on or off"):
        RedisStore.from_url(f"{REDIS_URL}?search=maybe")
