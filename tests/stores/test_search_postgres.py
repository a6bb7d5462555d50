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


def test_the_append_marks_its_session_and_the_indexer_writes_each_rows_words(
        fresh: PostgresStore) -> None:
    """The append writes no words: its statement marks the session from its first row
    (one row's statement and a batch's alike); the indexer writes the rows' distinct
    words and takes the mark off."""
    fresh._stop_indexer()  # the marks as the appends leave them
    call = Message(role="assistant", parts=[ToolCall(id="c1", name="get_weather",
                                                     arguments={"city": "Lisbon"})])
    batch = [Message.user("The café, the CAFÉ and the naïve x1"), call]
    fresh.create_session("s")
    fresh.create_session("t")
    fresh.append("s", batch[:1])  # one row: plain parameters
    fresh.append("s", [Message.user("alpha beta alpha"), *batch[1:]])  # a batch: JSON
    marks = "SELECT session_id, unindexed_from FROM {s}.sessions ORDER BY session_id"
    assert _sql(fresh, marks) == [("s", 0), ("t", None)]
    assert _sql(fresh, "SELECT count(*) FROM {s}.message_words") == [(0,)]
    fresh._flush_pending()
    assert _sql(fresh, marks) == [("s", None), ("t", None)]
    fresh.append("s", [Message.user("gamma")])
    fresh.append("s", [Message.user("delta")])
    assert _sql(fresh, marks) == [("s", 3), ("t", None)]  # from the first row left
    fresh._flush_pending()
    stored = dict(_sql(fresh, "SELECT seq, words FROM {s}.message_words"))
    assert stored == {0: "the cafe and naive x1", 1: "alpha beta",
                      2: "get weather city lisbon", 3: "gamma", 4: "delta"}
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
    fresh._flush_pending()
    (kept,) = _sql(fresh, "SELECT length(words) FROM {s}.message_words WHERE seq = 2")[0]
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
            assert "Bitmap Index Scan on message_words_search_simple" in plan, plan
            assert "Seq Scan on message" not in plan, plan
            assert "Index Only Scan using sessions_unindexed" in plan, plan
    got = fresh._b_search("default", parse_query("common"), None, None, None, 3)
    assert got is not None and [seq for _s, _i, seq, _r in got] == [0, 1, 2]
    # the indexing: marked sessions from their partial index, a batch's rows checked by
    # primary-key probes, whatever the statistics say
    _sql(fresh, "ANALYZE {s}.sessions")
    with fresh._connections.connection() as conn, pg_search._planned(conn):
        values = {"tenant": "default", "session_id": "s", "seqs": list(range(500)),
                  "ids": ["x"] * 500, "words": ["w"] * 500}
        plan = "\n".join(line for (line,) in conn.execute(
            "EXPLAIN " + fresh._search.still_there, values))
        marked = "\n".join(line for (line,) in conn.execute(
            "EXPLAIN " + fresh._search.marked[True], {"tenant": "default", "after_tenant": "",
                                                       "after_id": "", "limit": 5}))
    assert "Index Only Scan using messages_pkey" in plan or (
        "Index Scan using messages_pkey" in plan), plan
    assert "sessions_unindexed" in marked, marked


# ---------------------------------------------------------------- search=off, migration


def test_search_off_scans_and_a_store_with_the_index_indexes_its_rows(
        fresh: PostgresStore) -> None:
    """A ``search=off`` store writes no words and scans; its appends mark their sessions
    all the same, so a store that keeps the index indexes them (a search of their tenant
    first): turning the index off and on again needs no build."""
    off = _store(schema=fresh.schema, search=False)
    try:
        off.create_session("s", tenant="t1")
        off.append("s", [Message.user("quokka off")], tenant="t1")
        assert _sql(fresh, "SELECT count(*) FROM {s}.message_words") == [(0,)]
        assert _sql(fresh, "SELECT unindexed_from FROM {s}.sessions") == [(0,)]
        assert off._b_search("t1", parse_query("quokka"), None, None, None, 5) is None
        page = off.search("quokka", tenant="t1")
        assert page.scanned == 1 and [h.message.text for h in page.items] == ["quokka off"]
        assert _sql(fresh, "SELECT count(*) FROM {s}.message_words") == [(0,)]
    finally:
        off.close()
    assert not fresh.search_index_state().usable
    fresh.create_session("s", tenant="t2")
    fresh.append("s", [Message.user("quokka on")], tenant="t2")
    page = fresh.search("quokka", tenant="t1")
    assert page.scanned is None and [h.message.text for h in page.items] == ["quokka off"]
    assert fresh.search("quokka", tenant="t2").scanned is None
    assert fresh.search_index_state().usable
    assert fresh.build_search_index() == 0


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


def test_an_existing_database_is_migrated_and_indexed_in_resumable_batches(
        fresh: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database of the release before the index: migrated, every session with
    messages is marked; more rows than a search indexes first (``AUTO_BUILD_ROWS``) are
    scanned meanwhile; the build indexes them a batch at a time, each batch moving its
    session's mark, so a stopped build resumes where it was."""
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
            "simple", pg_search.WORDS_VERSION, 12, False)
        page = old.search("kiwi", limit=50)
        assert page.scanned == 12 and len(page.items) == 12  # the scan, meanwhile
        # (having indexed its first 5 rows and more: the first two sessions)
        assert old.search_index_state().unindexed == 6

        seen: list[tuple[int, int]] = []

        def stop_after_two_batches(done: int, total: int) -> None:
            seen.append((done, total))
            if len(seen) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            old.build_search_index(batch=2, progress=stop_after_two_batches)
        assert seen == [(2, 6), (3, 6)]  # s2's rows, in two batches
        assert _sql(old, "SELECT session_id, unindexed_from FROM {s}.sessions WHERE "
                         "unindexed_from IS NOT NULL") == [("s3", 0)]  # where to resume
        seen.clear()
        assert old.build_search_index(batch=2, progress=lambda d, t: seen.append((d, t))) == 3
        assert seen == [(2, 3), (3, 3)]
        assert old.search_index_state().usable
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
    """An index whose rows hold an older version's words is not used, nor written; the
    build cuts every row's words again (resumable, as any build) and records the
    version. A store of an older release than the index indexes nothing: its rows stay
    marked for a store of the index's release."""
    fresh.create_session("s")
    fresh.append("s", [Message.user(f"mango {i}") for i in range(5)])
    fresh._flush_pending()
    _sql(fresh, "UPDATE {s}.message_words SET words = 'stale'")
    _sql(fresh, "UPDATE {s}.search_index SET words_version = words_version - 1")
    reopened = _store(schema=fresh.schema)
    try:
        assert not reopened.search_index_state().usable and not reopened.search_writes_words
        assert reopened.search("mango").scanned == 5
        seen: list[tuple[int, int]] = []
        assert reopened.build_search_index(batch=2, progress=lambda d, t: seen.append(
            (d, t))) == 5
        assert seen == [(2, 5), (4, 5), (5, 5)]
        state = reopened.search_index_state()
        assert state.usable and state.words_version == pg_search.WORDS_VERSION
        assert reopened.search_writes_words
        page = reopened.search("mango")
        assert page.scanned is None and len(page.items) == 5
    finally:
        reopened.close()
    _sql(fresh, "UPDATE {s}.search_index SET words_version = words_version + 1")
    older = _store(schema=fresh.schema)
    try:
        assert not older.search_writes_words
        older.append("s", [Message.user("mango newer")])
        older._flush_pending()
        assert _sql(fresh, "SELECT count(*) FROM {s}.message_words WHERE seq = 5") == [(0,)]
        assert _sql(fresh, "SELECT unindexed_from FROM {s}.sessions") == [(5,)]
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
                                       "%s AND indexname LIKE 'message_words_search%%'",
                                    (s.schema,))]
        assert names == ["message_words_search_english"]
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


# ---------------------------------------------------------------- the indexer (schema m006)


def _words_now(store: PostgresStore) -> dict[tuple[str, int], str]:
    return {(sid, seq): words for sid, seq, words in _sql(
        store, "SELECT session_id, seq, words FROM {s}.message_words")}


def _words_of_rows(store: PostgresStore) -> dict[tuple[str, int], str]:
    """What ``message_words`` must hold: the words of every stored row."""
    return {(sid, seq): pg_search.row_words(bytes(data)) for sid, seq, data in _sql(
        store, "SELECT session_id, seq, data FROM {s}.messages")}


def _marks(store: PostgresStore) -> dict[str, int]:
    return dict(_sql(store, "SELECT session_id, unindexed_from FROM {s}.sessions "
                            "WHERE unindexed_from IS NOT NULL"))


def test_a_search_right_after_an_append_finds_it_through_the_index(
        fresh: PostgresStore) -> None:
    fresh._stop_indexer()
    fresh.create_session("s")
    for i in range(3):
        fresh.append("s", [Message.user(f"papaya {i}")])
        page = fresh.search("papaya")
        assert page.scanned is None and len(page.items) == i + 1
    assert _marks(fresh) == {}


def test_the_indexer_thread_indexes_what_the_appends_leave(fresh: PostgresStore) -> None:
    """Past ``FLUSH_AT`` rows the appends wake the thread; fewer are indexed at its next
    look (``IDLE_S``). Polled, not timed."""
    fresh.create_session("s")
    fresh.append("s", [Message.user(f"fig {i}") for i in range(pg_search.FLUSH_AT)])
    _wait_for(lambda: not _marks(fresh))
    fresh.append("s", [Message.user("fig again")])
    _wait_for(lambda: not _marks(fresh))
    assert _words_now(fresh) == _words_of_rows(fresh)


def _wait_for(done: Any, seconds: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "the indexer thread did not index the rows"
        time.sleep(0.02)


def test_removals_take_the_words_with_them(fresh: PostgresStore) -> None:
    """Pop, clear and delete remove their rows' words in their own transaction and leave
    the mark only on rows still to index; positions used again get their new words."""
    fresh._stop_indexer()
    for sid in ("a", "b", "c"):
        fresh.create_session(sid)
        fresh.append(sid, [Message.user(f"plum {sid} {i}") for i in range(4)])
    fresh._flush_pending()
    fresh.append("a", [Message.user("plum a late")])  # marked from 4
    assert fresh.pop("a") is not None  # the row left to index: the mark goes with it
    assert _marks(fresh) == {}
    assert fresh.pop("a") is not None  # an indexed row: its words go
    fresh.append("a", [Message.user("pear a new")])  # position 3 again, marked
    assert _marks(fresh) == {"a": 3}
    fresh.clear("b")
    fresh.delete_session("c")
    fresh._flush_pending()
    assert _words_now(fresh) == _words_of_rows(fresh)
    assert sorted(_words_now(fresh)) == [("a", 0), ("a", 1), ("a", 2), ("a", 3)]
    assert [h.message.text for h in fresh.search("pear").items] == ["pear a new"]
    assert [h.seq for h in fresh.search('"plum a"').items] == [0, 1, 2]


class _Meddling:
    """``Statements`` whose ``name`` runs ``act`` once, when the indexer reads it."""

    def __init__(self, real: Any, name: str, act: Any) -> None:
        self._real, self._name, self._act = real, name, act

    def __getattr__(self, name: str) -> Any:
        if name == self._name and self._act is not None:
            act, self._act = self._act, None
            act()
        return getattr(self._real, name)


@pytest.mark.parametrize("when", ["after the read", "around the insert"])
def test_a_truncation_meanwhile_leaves_no_stale_words(fresh: PostgresStore, when: str,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """Another process pops rows and appends others at their positions while a batch is
    under way, after the batch read its rows or while its words are inserted (before it
    locks the mark; the statements are pipelined, so either side of the insert): the
    batch writes nothing, and the next one indexes the rows as they are."""
    fresh._stop_indexer()
    fresh.create_session("s")
    fresh.append("s", [Message.user(f"old{i} words") for i in range(5)])
    other = _store(schema=fresh.schema, search=False)

    def meddle() -> None:
        for _ in range(2):
            other.pop("s")
        other.append("s", [Message.user("new3 words"), Message.user("new4 words")])

    try:
        name = "insert_words" if when == "after the read" else "lock_mark"
        monkeypatch.setattr(fresh, "_search", _Meddling(fresh._search, name, meddle))
        fresh._flush_pending()
        assert _words_now(fresh) == {}  # the batch wrote nothing
        assert _marks(fresh) == {"s": 0}
        fresh._flush_pending()
        assert _words_now(fresh) == _words_of_rows(fresh) and _marks(fresh) == {}
        assert fresh.search("old4").items == []
        assert [h.seq for h in fresh.search("new4").items] == [4]
    finally:
        other.close()


def test_a_batch_cut_off_writes_nothing(fresh: PostgresStore) -> None:
    """The indexer's connection lost in the middle of its batch (its words inserted, the
    batch waiting for the session row's lock, which another transaction holds): neither
    its words nor its mark's move are kept (one transaction), and the next pass indexes
    the rows."""
    import threading

    fresh._stop_indexer()
    fresh.create_session("s")
    fresh.append("s", [Message.user(f"lime {i}") for i in range(3)])
    errors: list[BaseException] = []

    def flush() -> None:
        try:
            fresh._flush_pending()
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(PG_URL) as holder, psycopg.connect(PG_URL, autocommit=True) as killer:
        holder.execute(f"SELECT 1 FROM {fresh.schema}.sessions WHERE session_id = 's' "
                       "FOR UPDATE")
        indexer = threading.Thread(target=flush)
        indexer.start()
        waiting = ("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                   "query LIKE %s")
        _wait_for(lambda: killer.execute(waiting, ("%FOR NO KEY UPDATE%",)).fetchone())
        (pid,) = killer.execute(waiting, ("%FOR NO KEY UPDATE%",)).fetchone() or (0,)
        assert killer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (
            True,)
        holder.rollback()
        indexer.join()
    assert len(errors) == 1 and isinstance(errors[0], psycopg.OperationalError), errors
    assert _words_now(fresh) == {} and _marks(fresh) == {"s": 0}
    fresh.recover()
    fresh._flush_pending()
    assert _words_now(fresh) == _words_of_rows(fresh) and _marks(fresh) == {}


def test_two_processes_index_at_once(fresh: PostgresStore) -> None:
    """Two stores of a schema index the same marked sessions from two threads: each row's
    words are written once and every mark is taken off."""
    import threading

    fresh._stop_indexer()
    for k in range(12):
        fresh.create_session(f"s{k}")
        fresh.append(f"s{k}", [Message.user(f"guava {k} {i}") for i in range(40)])
    other = _store(schema=fresh.schema)
    other._stop_indexer()
    try:
        errors: list[BaseException] = []

        def flush(store: PostgresStore) -> None:
            try:
                with store._connections.connection() as conn:
                    store._index_marked(conn, batch=7)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=flush, args=(s,)) for s in (fresh, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert _marks(fresh) == {}
        assert _words_now(fresh) == _words_of_rows(fresh)
        assert len(_words_now(fresh)) == 480
        found = fresh._b_search("default", parse_query("guava"), None, None, None, 500)
        assert found is not None and len(found) == 480
    finally:
        other.close()
