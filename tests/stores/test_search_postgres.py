"""PostgreSQL's search index (issue 22).

The search contract runs again here with the engine's scan forbidden, on a plain and
on a partitioned schema: every answer comes from the index. Then what is PostgreSQL's
own: the words the append writes, the tenant marker that keeps the index scan inside
the tenant, plans that stay on the index whatever the statistics, ``search=off``,
an existing database migrated and filled in resumable batches, a stemming
configuration, long words, and the query's words as data.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import msgspec
import pytest
import test_search_contract as contract
from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory import Message
from chathistory.model import ToolCall
from chathistory.stores import open_store
from chathistory.stores.search import Query, Term, index_words, parse_query

psycopg = pytest.importorskip("psycopg")
from test_postgres import PG_URL, _schema, _store  # noqa: E402

from chathistory.stores.postgres import PostgresStore  # noqa: E402
from chathistory.stores.postgres import schema as pg_schema  # noqa: E402
from chathistory.stores.postgres import search as pg_search  # noqa: E402

for _name in dir(contract):  # the contract again, answered by the index alone
    _test = getattr(contract, _name)
    if _name.startswith("test_") and "store" in inspect.signature(_test).parameters:
        globals()[f"{_name}_indexed"] = _test


def _no_scan(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the search index must answer, not a scan")


def _answered(primitive: Any) -> Any:
    def answered(*args: Any) -> Any:
        found = primitive(*args)
        assert found is not None, "the search index must answer, not a scan"
        return found
    return answered


def _opened(**options: Any) -> Iterator[PostgresStore]:
    s = _store(schema=_schema(), drop_schema_on_close=True, **options)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(params=[None, 4], ids=["plain", "partitioned"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[PostgresStore]:
    for s in _opened(partitions=request.param):
        monkeypatch.setattr(s, "_scan_search", _no_scan)
        for name in ("_b_search", "_b_search_sessions"):  # None would make the engine scan
            monkeypatch.setattr(s, name, _answered(getattr(s, name)))
        yield s


@pytest.fixture
def fresh() -> Iterator[PostgresStore]:
    yield from _opened()


def _sql(store: PostgresStore, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with store._connections.connection() as conn:
        cursor = conn.execute(query.replace("{s}", store.schema), params)
        return cursor.fetchall() if cursor.description else []


def _explain(store: PostgresStore, query: str, params: dict[str, Any], analyze: bool = False
             ) -> str:
    with store._connections.connection() as conn, pg_search._planned(conn):
        how = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " if analyze else "EXPLAIN "
        return "\n".join(line for (line,) in conn.execute(how + query, params))


def _params(store: PostgresStore, tenant: str, query: str, **more: Any) -> dict[str, Any]:
    return {**store._search_params(tenant, pg_search.plan(parse_query(query)).text),
            "limit": 20, **more}


# ---------------------------------------------------------------- what is written


def test_the_append_writes_each_rows_distinct_words(fresh: PostgresStore) -> None:
    call = Message(role="assistant", parts=[ToolCall(id="c1", name="get_weather",
                                                     arguments={"city": "Lisbon"})])
    batch = [Message.user("The café, the CAFÉ and the naïve x1"), call]
    fresh.create_session("s")
    fresh.append("s", batch[:1])  # one row: plain parameters
    fresh.append("s", [Message.user("alpha beta alpha"), *batch[1:]])  # a batch: JSON
    stored = dict(_sql(fresh, "SELECT seq, words FROM {s}.messages"))
    assert stored == {0: "the cafe and naive x1", 1: "alpha beta",
                      2: "get weather city lisbon"}
    for seq, data in _sql(fresh, "SELECT seq, data FROM {s}.messages"):
        assert stored[seq] == " ".join(dict.fromkeys(index_words(bytes(data)).split(" ")))
    assert fresh._b_search("default", parse_query("lisbon"), None, None, None, 5) is not None


def test_long_words_are_indexed_by_their_start_and_checked(fresh: PostgresStore) -> None:
    long = "a" * 70 + "tail"
    other = "a" * 70 + "else"  # the same first 64 characters
    fresh.create_session("s")
    fresh.append("s", [Message.user(f"see {long}"), Message.user(f"see {other}")])
    assert [h.message.text for h in fresh.search(long).items] == [f"see {long}"]
    assert len(fresh.search("a" * 68 + "*").items) == 2
    assert [h.message.text for h in fresh.search("a" * 70 + "t*").items] == [f"see {long}"]
    assert fresh.search("a" * 70 + "tails").items == []
    huge = " ".join(f"w{i}" for i in range(60_000))  # 400,000 characters of distinct words
    fresh.append("s", [Message.user(huge)])
    (kept,) = _sql(fresh, "SELECT length(words) FROM {s}.messages WHERE seq = 2")[0]
    assert kept <= pg_search.WORDS_CHARS
    assert [h.seq for h in fresh.search("w7").items] == [2]  # the first words are in
    assert fresh.search("w59999").items == []  # (past the cut)


def _oracle_row_words(data: bytes) -> str:
    """``row_words`` as its docstring says it, written out plainly here: each word cut
    to ``WORD_CHARS``, the first of equal ones kept, as many whole words as
    ``WORDS_CHARS`` holds."""
    kept: list[str] = []
    seen: set[str] = set()
    length = -1  # of the kept words and the spaces between them
    for word in index_words(data).split():
        word = word[:pg_search.WORD_CHARS]
        if word in seen:
            continue
        if length + 1 + len(word) > pg_search.WORDS_CHARS:
            break
        kept.append(word)
        seen.add(word)
        length += 1 + len(word)
    return " ".join(kept)


_WORDISH = st.text(alphabet=st.sampled_from("abcXYZé09_- .,\n\u00e9\u0301\u4e2d"), max_size=80)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_WORDISH, st.integers(60, 70).map(lambda n: "q" * n)), max_size=12))
def test_row_words_matches_its_definition(pieces: list[str]) -> None:
    data = msgspec.json.encode(Message.user("x " + " ".join(pieces)))
    assert pg_search.row_words(data) == _oracle_row_words(data)


def test_row_words_caps_what_it_keeps() -> None:
    huge = " ".join(f"w{i}" for i in range(60_000)) + " " + "z" * 70
    data = msgspec.json.encode(Message.user(huge))
    kept = pg_search.row_words(data)
    assert kept == _oracle_row_words(data)
    assert 0 < len(kept) <= pg_search.WORDS_CHARS and "w0" in kept.split()


def test_query_words_are_data(fresh: PostgresStore) -> None:
    fresh.create_session("s")
    fresh.append("s", [Message.user("it's fine")])
    odd = Query("x", (Term(("it's",)), Term(("a\\", "b'c"), prefix=True)))
    assert fresh._b_search("default", odd, None, None, None, 5) == []
    assert pg_search._lexeme("b'c\\") == "'b''c\\\\'"


# ---------------------------------------------------------------- scope and plans


def test_the_index_scan_reads_only_the_tenants_rows(fresh: PostgresStore) -> None:
    """Another tenant's 40 matching rows never leave the index: the tenant's marker is
    ANDed to the query, so the bitmap holds the tenant's one row (and the session's
    marker narrows a search of spans to their sessions' rows)."""
    for tenant, sessions in (("t1", ["a", "b"]), ("t2", ["a", "c"])):
        for sid in sessions:
            fresh.create_session(sid, tenant=tenant)
    fresh.append("a", [Message.user("zebra one")], tenant="t1")
    fresh.append("b", [Message.user("zebra two")], tenant="t1")
    fresh.append("a", [Message.user(f"zebra {i}") for i in range(20)], tenant="t2")
    fresh.append("c", [Message.user(f"zebra {i}") for i in range(20)], tenant="t2")
    got = fresh._b_search("t1", parse_query("zebra"), None, None, None, 50)
    assert got is not None and sorted((sid, seq) for _s, sid, seq, _r in got) == [
        ("a", 0), ("b", 0)]
    assert fresh._b_search_sessions("t1", parse_query("zebra"), None, 10) == {"a", "b"}
    assert fresh._b_search_sessions("t1", parse_query("zebra"), [("a", 0, 1), ("c", 0, 0)],
                                    10) == {"a"}
    plan = _explain(fresh, fresh._search.search[False, False, False],
                    _params(fresh, "t1", "zebra"), analyze=True)
    index_rows = [line for line in plan.splitlines() if "Bitmap Index Scan" in line]
    assert len(index_rows) == 1 and "rows=2 " in plan.split("Bitmap Index Scan")[1], plan
    spans = {"ids": ["a"], "los": [0], "his": [99]}
    plan = _explain(fresh, fresh._search.search[True, False, False],
                    _params(fresh, "t1", "zebra", **spans), analyze=True)
    assert "rows=1 " in plan.split("Bitmap Index Scan")[1], plan


def test_plans_stay_on_the_index_whatever_the_statistics(fresh: PostgresStore) -> None:
    """A word in every row, fresh statistics that say so: the search still reads the
    index (never every row of the tenant, computing each row's words), and the check
    for rows without words reads its partial index."""
    fresh.create_session("s")
    fresh.append("s", [Message.user(f"common word {i}") for i in range(400)])
    _sql(fresh, "ANALYZE {s}.messages")
    for query in ("common", "rare", '"common word"'):
        for key in fresh._search.search:
            params = _params(fresh, "default", query, ids=["s"], los=[0], his=[500],
                             user="u", score=1.0, after_id="s", after_seq=0)
            plan = _explain(fresh, fresh._search.search[key], params)
            assert "Bitmap Index Scan on messages_search_simple" in plan, plan
            assert "Seq Scan on messages" not in plan, plan
            assert "Index Only Scan using messages_unindexed" in plan, plan
    got = fresh._b_search("default", parse_query("common"), None, None, None, 3)
    assert got is not None and [seq for _s, _i, seq, _r in got] == [0, 1, 2]
    # the fill: a batch's rows by primary-key probes, whatever messages_unindexed holds
    with fresh._connections.connection() as conn, pg_search._planned(conn, pg_search._PROBES):
        keys = (["default"] * 500, ["s"] * 500, list(range(500)), ["x"] * 500)
        plan = "\n".join(line for (line,) in conn.execute(
            "EXPLAIN " + fresh._search.fill_rows, keys))
    assert "Nested Loop" in plan and "Index Scan using messages_pkey" in plan, plan


# ---------------------------------------------------------------- search=off, migration


def test_search_off_scans_and_its_rows_make_their_tenant_scan(fresh: PostgresStore) -> None:
    off = _store(schema=fresh.schema, search=False)
    try:
        off.create_session("s", tenant="t1")
        off.append("s", [Message.user("quokka off")], tenant="t1")
        assert _sql(fresh, "SELECT words FROM {s}.messages") == [(None,)]
        assert off._b_search("t1", parse_query("quokka"), None, None, None, 5) is None
        page = off.search("quokka", tenant="t1")
        assert page.scanned == 1 and [h.message.text for h in page.items] == ["quokka off"]
    finally:
        off.close()
    fresh.create_session("s", tenant="t2")
    fresh.append("s", [Message.user("quokka on")], tenant="t2")
    # t1 has a row the index lacks: its searches scan, and find it; t2's use the index
    page = fresh.search("quokka", tenant="t1")
    assert page.scanned == 1 and [h.message.text for h in page.items] == ["quokka off"]
    assert fresh.search("quokka", tenant="t2").scanned is None
    assert not fresh.search_index_state().usable
    seen: list[tuple[int, int]] = []
    assert fresh.build_search_index(progress=lambda done, total: seen.append((done, total))) == 1
    assert seen == [(1, 1)] and fresh.search_index_state().usable
    page = fresh.search("quokka", tenant="t1")
    assert page.scanned is None and [h.message.text for h in page.items] == ["quokka off"]


def test_url_options() -> None:
    schema = _schema()
    s = open_store(f"{PG_URL}?schema={schema}&search=off&search_config=english")
    try:
        assert isinstance(s, PostgresStore)
        assert not s.search_indexed and s.search_config == "english"
    finally:
        s.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    with pytest.raises(ValueError, match="search must be on or off"):
        PostgresStore.from_url(f"{PG_URL}?search=maybe")
    with pytest.raises(ValueError, match="search_config must match"):
        PostgresStore(PG_URL, schema=_schema(), search_config="english'--")
    with pytest.raises(ValueError, match="no text search configuration"):
        PostgresStore(PG_URL, schema=_schema(), search_config="klingon",
                      drop_schema_on_close=True)


def _copy_as_an_earlier_release(source: PostgresStore, schema: str) -> None:
    """``schema`` migrated up to m004 and holding ``source``'s rows, as the release
    before the index stored them."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        earlier = [(n, step) for n, step in pg_schema.MIGRATIONS if n < "m005"]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(pg_schema, "MIGRATIONS", earlier)
            pg_schema.migrate(conn, schema)
        for table in ("sessions", "message_ids", "messages"):
            columns = ", ".join(name for (name,) in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s", (schema, table)))
            conn.execute(f"INSERT INTO {schema}.{table} ({columns}) "
                         f"SELECT {columns} FROM {source.schema}.{table}")


def test_an_existing_database_is_migrated_and_filled_in_resumable_batches(
        fresh: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = {f"s{k}": [f"kiwi {k} {i}" for i in range(3)] for k in range(4)}
    for sid, lines in texts.items():
        fresh.create_session(sid)
        fresh.append(sid, [Message.user(t) for t in lines])
    schema = _schema()
    _copy_as_an_earlier_release(fresh, schema)
    monkeypatch.setattr(pg_search, "AUTO_BUILD_ROWS", 5)  # 12 rows: left to the build
    old = _store(schema=schema, drop_schema_on_close=True)
    try:
        assert old.search_index_state() == pg_search.SearchState(
            "simple", pg_search.WORDS_VERSION, 6, False)
        page = old.search("kiwi", limit=50)
        assert page.scanned == 12 and len(page.items) == 12  # the scan, meanwhile

        seen: list[tuple[int, int]] = []

        def stop_after_two_batches(done: int, total: int) -> None:
            seen.append((done, total))
            if len(seen) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            old.build_search_index(batch=5, progress=stop_after_two_batches)
        assert seen == [(5, 12), (10, 12)]
        stored = _sql(old, "SELECT fill_after::text FROM {s}.search_index")[0][0]
        assert stored is not None  # where to resume
        assert _sql(old, "SELECT count(*) FROM {s}.messages WHERE words IS NULL") == [(2,)]
        seen.clear()
        assert old.build_search_index(batch=5, progress=lambda d, t: seen.append((d, t))) == 2
        assert seen == [(2, 2)]
        assert old.search_index_state().usable
        assert _sql(old, "SELECT fill_after FROM {s}.search_index") == [(None,)]
        page = old.search("kiwi", limit=50)
        assert page.scanned is None and len(page.items) == 12
        assert {(h.session_id, h.message.text) for h in old.search("2").items} == {
            ("s2", t) for t in texts["s2"]} | {(f"s{k}", f"kiwi {k} 2") for k in range(4)}
    finally:
        old.close()


def test_opening_fills_a_few_unindexed_rows_at_once(fresh: PostgresStore) -> None:
    fresh.create_session("s")
    fresh.append("s", [Message.user("lychee")])
    schema = _schema()
    _copy_as_an_earlier_release(fresh, schema)
    reopened = _store(schema=schema, drop_schema_on_close=True)
    try:
        assert reopened.search_index_state().usable
        assert reopened.search("lychee").scanned is None
    finally:
        reopened.close()


def test_words_of_another_tokenizer_version_are_cut_again(fresh: PostgresStore) -> None:
    """An index whose rows hold an older version's words is not used; the build cuts
    every row's words again (resumable like the fill) and records the version. A store
    of an older release than the index writes no words: its rows wait for the fill."""
    fresh.create_session("s")
    fresh.append("s", [Message.user(f"mango {i}") for i in range(5)])
    _sql(fresh, "UPDATE {s}.messages SET words = 'stale'")
    _sql(fresh, "UPDATE {s}.search_index SET words_version = words_version - 1")
    reopened = _store(schema=fresh.schema)
    try:
        assert not reopened.search_index_state().usable and reopened.search_writes_words
        assert reopened.search("mango").scanned == 5
        seen: list[tuple[int, int]] = []
        assert reopened.build_search_index(batch=2, progress=lambda d, t: seen.append(
            (d, t))) == 5
        assert seen == [(2, 5), (4, 5), (5, 5)]
        state = reopened.search_index_state()
        assert state.usable and state.words_version == pg_search.WORDS_VERSION
        page = reopened.search("mango")
        assert page.scanned is None and len(page.items) == 5
    finally:
        reopened.close()
    _sql(fresh, "UPDATE {s}.search_index SET words_version = words_version + 1")
    older = _store(schema=fresh.schema)
    try:
        assert not older.search_writes_words
        older.append("s", [Message.user("mango newer")])
        assert _sql(fresh, "SELECT words FROM {s}.messages WHERE seq = 5") == [(None,)]
        assert older.search("mango").scanned == 6
        with pytest.raises(ValueError, match="newer than this release"):
            older.build_search_index()
    finally:
        older.close()


# ---------------------------------------------------------------- configurations


def test_a_stemming_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _store(schema=_schema(), search_config="english", drop_schema_on_close=True)
    monkeypatch.setattr(s, "_scan_search", _no_scan)
    try:
        names = [n for (n,) in _sql(s, "SELECT indexname FROM pg_indexes WHERE schemaname = "
                                       "%s AND indexname LIKE 'messages_search%%'", (s.schema,))]
        assert names == ["messages_search_english"]
        s.create_session("s")
        s.append("s", [Message.user("She runs daily"), Message.user("the cats sat"),
                       Message.user("cats the sat")])
        assert [h.seq for h in s.search("running").items] == [0]
        assert sorted(h.seq for h in s.search("cat").items) == [1, 2]
        assert [h.seq for h in s.search('"the cats"').items] == [1]  # a phrase: exact words
        assert s.search("the").items == []  # stop words only: nothing (not every message)
    finally:
        s.close()


def test_another_configuration_scans_until_the_index_is_rebuilt(fresh: PostgresStore) -> None:
    fresh.create_session("s")
    fresh.append("s", [Message.user("dogs bark")])
    english = _store(schema=fresh.schema, search_config="english")
    try:
        assert not english.search_index_state().usable
        assert english.search("dog").scanned == 1  # the scan knows no stems
        assert fresh.search("dogs").scanned is None  # the simple index still answers
        assert english.build_search_index() == 0
        assert english.search_index_state().usable
        page = english.search("dog")
        assert page.scanned is None and [h.message.text for h in page.items] == ["dogs bark"]
        # the simple store's searches now scan: the index is not of its configuration
        assert fresh.search("dogs").scanned == 1
    finally:
        english.close()


# ---------------------------------------------------------------- what removes rows


def test_erased_and_purged_messages_are_not_found(fresh: PostgresStore) -> None:
    fresh.create_session("a", tenant="t", user="ann")
    fresh.create_session("b", tenant="t", user="bob")
    fresh.create_session("c", tenant="t", ttl=3600)
    for sid in "abc":
        fresh.append(sid, [Message.user(f"durian {sid}")], tenant="t")
    fresh.erase(tenant="t", user="ann")
    assert sorted(h.session_id for h in fresh.search("durian", tenant="t").items) == ["b", "c"]
    found = fresh._b_get_session("t", "c")
    assert found is not None
    assert fresh._b_save_session(msgspec.structs.replace(
        found, version=found.version + 1, expires_at=fresh.now() - timedelta(minutes=1)),
        found.version)
    assert fresh.purge_expired() == 1
    assert [h.session_id for h in fresh.search("durian", tenant="t").items] == ["b"]
    assert _sql(fresh, "SELECT session_id FROM {s}.messages") == [("b",)]
    fresh.erase(tenant="t")
    assert fresh._b_search("t", parse_query("durian"), None, None, None, 5) == []
