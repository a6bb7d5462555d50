"""SQLite's search index (issue 22, ``sqlite_search.py``): searches are answered by the
FTS5 index (the scan is never reached), find what the reference finds, never leave the
tenant even when two tenants' tokens collide, and the index holds exactly the words
of the stored rows after every path that writes or removes rows; ``search=off``, a
stale index, and the resumable build of an existing database."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
import sys
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chathistory.cli import main
from chathistory.errors import Conflict
from chathistory.model import Message, ToolCall, ToolResult
from chathistory.model.parts import AudioPart, FilePart, Reasoning, TextPart
from chathistory.stores import search, sqlite_search
from chathistory.stores import sqlite as sqlite_module
from chathistory.stores.search import index_words, parse_query, words
from chathistory.stores.sqlite import SQLiteStore

Content = set[tuple[int, str, int]]
GOLDEN = Path(__file__).parent.parent / "golden" / "sqlite_0_1_0.db"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "search.db", counter="approx")
    try:
        yield s
    finally:
        s.close()


def _no_scan(monkeypatch: pytest.MonkeyPatch, store: SQLiteStore) -> None:
    """Make reading rows to search them fail: only the index may answer."""
    def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError("the search scanned rows")

    monkeypatch.setattr(store, "_scan_search", refuse)


def index_content(store: SQLiteStore, column: str = "words") -> Content:
    """``(rowid, token, position)`` of every token in a column of the FTS5 table."""
    conn = store._conn
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_vocab "
                 "USING fts5vocab(main, search_words, instance)")
    return set(conn.execute("SELECT doc, term, offset FROM temp.search_vocab WHERE col = ?",
                            (column,)).fetchall())


def expected_content(store: SQLiteStore, column: str = "words") -> Content:
    """What the index must hold: every stored row that is not pending, its words at
    their positions (``words``), or its tenant's token (``tenant``: every row with
    indexed text, with words or not)."""
    conn = store._conn
    pending = left_rows(store)
    out: Content = set()
    for tenant, session_id, seq, data, num in conn.execute(
            "SELECT m.tenant, m.session_id, m.seq, m.data, ss.num FROM messages AS m LEFT JOIN "
            "search_sessions AS ss ON ss.tenant = m.tenant AND ss.session_id = m.session_id"):
        assert num is not None, (tenant, session_id, seq)
        at = num << 32 | seq
        if at in pending:
            continue
        if column == "tenant":
            if sqlite_search.indexed_text(data):
                out.add((at, sqlite_search.tenant_token(tenant), 0))
            continue
        found = index_words(data)
        out.update((at, w, k) for k, w in enumerate(found.split(" ") if found else ()))
    return out


def assert_index_matches_rows(store: SQLiteStore) -> None:
    with store._lock:  # between the indexer thread's transactions
        assert index_content(store) == expected_content(store)
        assert index_content(store, "tenant") == expected_content(store, "tenant")
        docs = store._conn.execute("SELECT count(*) FROM search_words_docsize").fetchone()[0]
        assert docs == len(index_content(store, "tenant"))
        store._conn.execute("INSERT INTO search_words (search_words) VALUES ('integrity-check')")


def left_rows(store: SQLiteStore) -> set[int]:
    """The FTS rowids of the rows left to index: each session's rows from its watermark
    on."""
    return {num << 32 | seq for num, seq in store._conn.execute(
        "SELECT d.num, m.seq FROM search_dirty AS d JOIN search_sessions AS ss "
        "ON ss.num = d.num JOIN messages AS m ON m.tenant = ss.tenant "
        "AND m.session_id = ss.session_id AND m.seq >= d.from_seq")}


def pending(store: SQLiteStore) -> int:
    """The rows left to index, as the store counts them in the database."""
    with store._lock:  # between the indexer thread's transactions
        counted = int(store._conn.execute(sqlite_search._LEFT).fetchone()[0])
        assert counted == len(left_rows(store))
    return counted


def wait_for_the_indexer(store: SQLiteStore) -> None:
    """Until the indexer thread has left nothing pending (30 s at most)."""
    for _ in range(3000):
        if pending(store) == 0:
            break
        time.sleep(0.01)
    assert pending(store) == 0


# ---------------------------------------------------------------- the index answers


def test_the_index_answers_without_a_scan(store: SQLiteStore,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_session("a", user="ann")
    store.create_session("b", user="bob")
    store.append("a", [Message.user("the Café opens at nine"),
                       Message.assistant("naïve question about the café")])
    store.append("b", [Message.user("a café in Lisbon"), Message.assistant("nothing here")])
    _no_scan(monkeypatch, store)
    parsed = parse_query("cafe")
    assert store._b_search("default", parsed, None, None, None, 10) is not None
    assert store._b_search_sessions("default", parsed, None, 10) == {"a", "b"}
    assert store._b_search_sessions("default", parsed, [("b", 0, 2), ("nope", 0, 0)], 10
                                    ) == {"b"}
    page = store.search("cafe")
    assert page.scanned is None
    assert {(h.session_id, h.seq) for h in page.items} == {("a", 0), ("a", 1), ("b", 0)}
    assert [h.score for h in page.items] == sorted((h.score for h in page.items), reverse=True)
    assert {h.session_id for h in store.search("cafe", user="bob").items} == {"b"}
    assert [h.seq for h in store.search('"about the cafe"', session_id="a").items] == [1]
    assert [h.seq for h in store.search("caf* nine").items] == [0]
    hit = store.search("lisbon").items[0]
    assert hit.snippet[slice(*hit.marks[0])] == "Lisbon"
    with monkeypatch.context() as m:  # sessions_matching never reads rows either
        m.setattr(store, "_b_rows", lambda *a: pytest.fail("rows read"))
        spans = [("a", 0, 2), ("b", 0, 1)]
        assert store.sessions_matching("default", parsed, spans) == {"a", "b"}


def test_pages_follow_the_ranking_without_loss(store: SQLiteStore,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for s in range(5):
        store.create_session(f"s{s}")
        store.append(f"s{s}", [Message.user("kiwi " * (1 + (s * 7 + k) % 5) + "filler " * k)
                               for k in range(9)])
    _no_scan(monkeypatch, store)
    for within in (None, "s3"):
        everything = store.search("kiwi", limit=100, session_id=within).items
        seen, cursor = [], None
        while True:
            page = store.search("kiwi", limit=4, cursor=cursor, session_id=within)
            seen.extend((h.session_id, h.seq) for h in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == [(h.session_id, h.seq) for h in everything]
        assert len(seen) == (45 if within is None else 9)


_WORDS = st.sampled_from(["alpha", "alps", "Alpha", "café", "cafe", "CAFÉ", "x1", "2024",
                          "über", "naïve", "東京", "ﬁle", "file", "tool_call", "e\u0301t"])
_SEPARATORS = st.sampled_from([" ", "  ", ", ", "\n", "-", "_", "!", "'", "·"])


@st.composite
def _texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(_WORDS, _SEPARATORS), min_size=1, max_size=8))
    return "".join(w + sep for w, sep in parts)


@st.composite
def _queries(draw: st.DrawFn) -> str:
    terms = draw(st.lists(st.one_of(
        _WORDS, _WORDS.map(lambda w: w[:2] + "*"),
        st.tuples(_WORDS, _WORDS).map(lambda p: f'"{p[0]} {p[1]}"')), min_size=1, max_size=3))
    return " ".join(terms)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path_factory.mktemp("prop") / "p.db", counter="approx")
    try:
        yield s
    finally:
        s.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_texts(), min_size=1, max_size=12), queries=st.lists(_queries(),
                                                                         min_size=1, max_size=4))
def test_the_index_finds_what_the_reference_finds(shared: SQLiteStore, texts: list[str],
                                                  queries: list[str]) -> None:
    tenant = uuid.uuid4().hex  # a fresh tenant: every example also checks isolation
    shared.create_session("s", tenant=tenant)
    shared.create_session("t", tenant=tenant)
    shared.append("s", [Message.user(t) for t in texts[::2]], tenant=tenant)
    shared.append("t", [Message.user(t) for t in texts[1::2]], tenant=tenant)
    stored = {("s", k): t for k, t in enumerate(texts[::2])}
    stored.update({("t", k): t for k, t in enumerate(texts[1::2])})
    for q in queries:
        parsed = parse_query(q)
        found = shared._b_search(tenant, parsed, None, None, None, 100)
        assert found is not None
        expected = {key for key, text in stored.items() if parsed.matches(words(text))}
        assert {(sid, seq) for _score, sid, seq, _row in found} == expected, q
        in_spans = shared._b_search(tenant, parsed, [("s", 0, 99), ("t", 0, 99)], None, None, 100)
        assert in_spans is not None
        assert {(sid, seq) for _score, sid, seq, _row in in_spans} == expected, q
        sessions = {s for s, _k in expected}
        assert shared._b_search_sessions(tenant, parsed, None, 10) == sessions
        assert shared._b_search_sessions(tenant, parsed, [("t", 0, 99), ("s", 0, 99),
                                                          ("none", 0, 0)], 10) == sessions


# ---------------------------------------------------------------- the tenant


def test_each_row_carries_its_tenant_token(store: SQLiteStore) -> None:
    tokens = {sqlite_search.tenant_token(t) for t in ("a", "b", "default", "ü", "")}
    assert len(tokens) == 5
    assert all(len(p) == 12 and p.isascii() and p.isalnum() and p == p.lower()
               for p in tokens)
    store.create_session("x", tenant="t1")
    store.create_session("x", tenant="t2")
    store.append("x", [Message.user("Zebra, one!")], tenant="t1")
    store.append("x", [Message.user("zebra two")], tenant="t2")
    store.search("flush", tenant="t1")
    one, two = sqlite_search.tenant_token("t1"), sqlite_search.tenant_token("t2")
    assert {term for _at, term, _k in index_content(store)} == {"zebra", "one", "two"}
    assert {term for _at, term, _k in index_content(store, "tenant")} == {one, two}
    query = parse_query('zeb* "a b" c')
    assert sqlite_search.match_expression("t1", query) == (
        f'tenant : "{one}" AND words : ("zeb" * AND "a b" AND "c")')
    assert sqlite_search.match_expression(None, query) == 'words : ("zeb" * AND "a b" AND "c")'
    # a word of the text that is a tenant's token is a word, in the words column only
    store.append("x", [Message.user(f"the token {two} written by t1")], tenant="t1")
    assert [h.message.text for h in store.search(two, tenant="t1").items] == [
        f"the token {two} written by t1"]
    assert store.search(two, tenant="t2").items == []


def test_a_word_common_in_other_tenants_still_finds_the_tenants_own_rows(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search over a tenant reads the words alone while fewer than ``RANK_LIMIT`` rows
    of all tenants match, and with the tenant's token past it: other tenants' newer
    matches never crowd out the tenant's own."""
    monkeypatch.setattr(sqlite_search, "RANK_LIMIT", 3)
    store.create_session("mine", tenant="a")
    store.append("mine", [Message.user("okapi first"), Message.user("okapi second")],
                 tenant="a")
    store.create_session("rare", tenant="a")
    store.append("rare", [Message.user("tapir here")], tenant="a")
    for k in range(5):
        store.create_session(f"theirs{k}", tenant="b")
        store.append(f"theirs{k}", [Message.user(f"okapi of b {k}")], tenant="b")
    _no_scan(monkeypatch, store)
    assert {h.message.text for h in store.search("okapi", tenant="a").items} == {
        "okapi first", "okapi second"}

    def match(word: str) -> str:
        return store._read_with(lambda conn: sqlite_search.tenant_match(
            conn, "a", parse_query(word)))

    assert match("tapir") == sqlite_search.match_expression(None, parse_query("tapir"))
    assert "tenant :" in match("okapi")  # few matches: the words alone; else the token
    assert store._b_search_sessions("a", parse_query("okapi"), None, 10) == {"mine"}
    assert store._b_search_sessions("a", parse_query("tapir"), None, 10) == {"rare"}
    assert {h.message.text for h in store.search("okapi", tenant="b", limit=10).items} == {
        f"okapi of b {k}" for k in (2, 3, 4)}  # its RANK_LIMIT newest


def test_the_count_of_matches_and_the_search_read_one_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows indexed by another connection between the count that chose the words alone
    and the search itself do not push the tenant's own match out of the candidates."""
    monkeypatch.setattr(sqlite_search, "RANK_LIMIT", 3)
    path = tmp_path / "snap.db"
    store, other = (SQLiteStore(path, counter="approx") for _ in range(2))
    try:
        store.create_session("mine", tenant="a")
        store.append("mine", [Message.user("okapi of a")], tenant="a")
        other.create_session("theirs", tenant="b")
        other.append("theirs", [Message.user("okapi of b")], tenant="b")
        store.search("flush", tenant="a")
        real = sqlite_search.tenant_match
        injected: list[bool] = []

        def then_more(conn: sqlite3.Connection, tenant: str, query: Any) -> str:
            match = real(conn, tenant, query)  # 2 matches: the words alone
            if not injected:
                injected.append(True)
                other.append("theirs", [Message.user(f"okapi more {k}") for k in range(3)],
                             tenant="b")
                other.search("flush", tenant="b")  # indexed and committed meanwhile
            return match

        monkeypatch.setattr(sqlite_search, "tenant_match", then_more)
        assert [h.message.text for h in store.search("okapi", tenant="a").items] == [
            "okapi of a"]
    finally:
        store.close()
        other.close()


def test_scores_are_the_rows_own_and_do_not_move_with_other_tenants(
        store: SQLiteStore) -> None:
    """Over the tenant a hit scores ``1 / (1 + its words)``: the shortest rows with the
    query's words first, and nothing another tenant writes moves a score (BM25's counts
    over the whole table would: rows, their length, the rows holding each word)."""
    store.create_session("s", tenant="a")
    texts = ["ibex", "the ibex runs", "an ibex, an ibex and a goat"]
    store.append("s", [Message.user(t) for t in reversed(texts)], tenant="a")

    def scores() -> list[tuple[str, float]]:
        return [(h.message.text, h.score) for h in store.search("ibex", tenant="a").items]

    before = scores()
    assert before == [(t, 1 / (1 + len(words(t)))) for t in texts]
    store.create_session("t", tenant="b")
    store.append("t", [Message.user("ibex " * k + "elsewhere " * 50) for k in range(1, 40)],
                 tenant="b")
    assert len(store.search("ibex", tenant="b", limit=50).items) == 39
    assert scores() == before


def test_a_search_never_leaves_its_tenant_even_when_tokens_collide(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tenant is also in the join: tenants whose tokens were the same still see
    only their own rows."""
    monkeypatch.setattr(sqlite_search, "tenant_token", lambda tenant: "tsameforall0")
    store = SQLiteStore(tmp_path / "c.db", counter="approx")
    for tenant in ("t1", "t2"):
        store.create_session("same", tenant=tenant, user="u")
        store.create_session(f"own-{tenant}", tenant=tenant, user="u")
        store.append("same", [Message.user(f"okapi of {tenant}")], tenant=tenant)
        store.append(f"own-{tenant}", [Message.user(f"okapi alone {tenant}")], tenant=tenant)
    _no_scan(monkeypatch, store)
    for tenant, other in (("t1", "t2"), ("t2", "t1")):
        for user in (None, "u"):
            texts = {h.message.text for h in store.search("okapi", tenant=tenant,
                                                          user=user).items}
            assert texts == {f"okapi of {tenant}", f"okapi alone {tenant}"}
        assert [h.message.text for h in store.search("okapi", tenant=tenant,
                                                     session_id="same").items] == [
            f"okapi of {tenant}"]
        for word in ("okapi", "oka*"):  # a prefix term takes other statements
            assert store._b_search_sessions(tenant, parse_query(word), None, 10) == {
                "same", f"own-{tenant}"}
            assert store._b_search_sessions(tenant, parse_query(word), [
                ("same", 0, 1), (f"own-{other}", 0, 1)], 10) == {"same"}
            assert {h.session_id for h in store.search(word, tenant=tenant,
                                                       session_id="same").items} == {"same"}
        assert store.search(other, tenant=tenant).items == []
    store.close()


# ---------------------------------------------------------------- upkeep


def test_appends_wait_in_the_pending_list_for_the_indexer_or_a_search(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_search, "FLUSH_AT", 5)
    monkeypatch.setattr(sqlite_search, "BACKLOG", 12)
    store.create_session("s")
    for k in range(4):
        store.append("s", [Message.user(f"word{k}")])
    assert pending(store) == 4 and index_content(store) == set() and store._indexer is None
    store.append("s", [Message.user("word4")])  # the fifth wakes the indexer thread
    wait_for_the_indexer(store)
    assert_index_matches_rows(store)
    assert len(index_content(store)) == 5
    with store.atomic():  # inside a caller's transaction nothing is indexed
        for k in range(5, 12):
            store.append("s", [Message.user(f"word{k}")])
    store._stop_indexer()  # as if it were behind: appends index past BACKLOG themselves
    assert pending(store) == 7
    for k in range(12, 16):
        store.append("s", [Message.user(f"word{k}")])
    assert pending(store) == 11  # past FLUSH_AT, below BACKLOG: waiting for the indexer
    store.append("s", [Message.user("word16")])
    assert pending(store) == 0
    store.append("s", [Message.user("word17")])
    assert [h.seq for h in store.search("word17").items] == [17]  # a search indexes first
    assert pending(store) == 0
    assert_index_matches_rows(store)


def test_the_indexer_thread_waits_for_the_appends_to_pause(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends back to back (closer than QUIET_S) index their rows themselves past
    BACKLOG; the thread indexes only once they pause."""
    monkeypatch.setattr(sqlite_search, "FLUSH_AT", 5)
    monkeypatch.setattr(sqlite_search, "BACKLOG", 12)
    monkeypatch.setattr(sqlite_search, "QUIET_S", 0.5)  # the test's appends take ~1 ms
    flushed_by: list[str] = []
    flush = store._flush_pending

    def watched(*args: object) -> None:
        flushed_by.append(threading.current_thread().name)
        flush(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "_flush_pending", watched)
    store.create_session("s")
    started = time.monotonic()
    for k in range(11):  # past FLUSH_AT: the thread is woken, and waits
        store.append("s", [Message.user(f"word{k}")])
    assert store._indexer is not None
    if time.monotonic() - started < sqlite_search.QUIET_S:  # (a stalled machine: skip)
        assert pending(store) == 11 and index_content(store) == set()
        assert flushed_by == []
        store.append("s", [Message.user("word11")])  # BACKLOG: this append indexes
        assert pending(store) == 0 and flushed_by == ["MainThread"]
        assert_index_matches_rows(store)
    for k in range(12, 17):  # FLUSH_AT more, then a pause: the thread indexes them
        store.append("s", [Message.user(f"word{k}")])
    wait_for_the_indexer(store)
    assert flushed_by[-1] == "chathistory-search-index"
    assert_index_matches_rows(store)


def test_a_flush_uses_words_cut_beforehand_only_for_the_same_data(store: SQLiteStore) -> None:
    store.create_session("s")
    store.append("s", [Message.user("real words"), Message.user("second one")])
    first, second = sorted(left_rows(store))
    stale = {first: (b"{}", "bogus"),  # cut from other data: cut again
             second: (store._b_rows("default", "s", 1, 2)[0].data, "trusted")}
    with store.atomic() as conn:
        assert sqlite_search.flush(conn, 10, stale) == 2
    tokens = {(at, term) for at, term, _k in index_content(store)}
    assert tokens == {(first, "real"), (first, "words"), (second, "trusted")}


@pytest.mark.parametrize("handed", [True, False], ids=["handed-off", "read-back"])
def test_a_batch_of_large_rows_is_cut_by_its_bytes(store: SQLiteStore, handed: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Pending rows are read and indexed at most ``FLUSH_BYTES`` at a time (the first row
    of a batch always), not ``FLUSH_AT`` rows of any size (512 pastes of 9 MB):
    rows handed off by the append, and rows read back from the database."""
    monkeypatch.setattr(sqlite_search, "FLUSH_BYTES", 2500)
    if not handed:
        monkeypatch.setattr(sqlite_search, "HANDOFF_ROW_BYTES", 0)
    taken: list[int] = []
    for name in ("flush", "flush_handed"):  # rows read back, and rows handed off
        real = getattr(sqlite_search, name)

        def counting(*args: Any, real: Any = real, **kwargs: Any) -> Any:
            found = real(*args, **kwargs)  # a count (flush), or the rowids (flush_handed)
            taken.append(found if isinstance(found, int) else len(found))
            return found

        monkeypatch.setattr(sqlite_search, name, counting)
    store.create_session("s")
    big = "filler " * 150  # ~1 KB stored
    store.append("s", [Message.user(f"{big} row{k}") for k in range(7)]
                 + [Message.user("small")])
    assert pending(store) == 8
    assert [h.seq for h in store.search("row6").items] == [6]
    assert pending(store) == 0
    assert max(taken) <= 3 and sum(taken) == 8, taken  # ~1 KB rows, 2.5 KB a batch
    assert_index_matches_rows(store)


def test_one_thread_cuts_a_backlog_the_others_wait_for_it(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches that meet the same backlog do not each cut its words: one flushes, the
    others wait and find nothing left (each row's words are cut once)."""
    import threading

    store.create_session("s")
    store.append("s", [Message.user(f"word{k}") for k in range(40)])
    cut: list[int] = []
    real = sqlite_search.pending_texts

    def slow(found: Any) -> Any:
        cut.extend(at for at, _t, _d in found)
        time.sleep(0.2)  # long enough for every other search to arrive meanwhile
        return real(found)

    monkeypatch.setattr(sqlite_search, "pending_texts", slow)
    hits: list[list[int]] = []
    threads = [threading.Thread(target=lambda: hits.append(
        [h.seq for h in store.search("word39").items])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert hits == [[39]] * 4
    assert sorted(cut) == sorted(set(cut)) and len(cut) == 40
    assert_index_matches_rows(store)


def _reads_back(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rowids of pending rows the indexer reads back from the database (the rows it
    was not handed)."""
    read: list[int] = []
    real = sqlite_search.rows_left

    def counting(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        read.extend(at for at, _t, _d in found.rows)
        return found

    monkeypatch.setattr(sqlite_search, "rows_left", counting)
    return read


def test_appended_rows_are_indexed_from_memory(store: SQLiteStore,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The indexer is handed each append's rows: it reads back from the database only a
    row too large to hand off (``HANDOFF_ROW_BYTES``), the rows past the handoff's bytes
    (``HANDOFF_BYTES``), and the session's rows after such a row (a watermark moves
    without a gap) but their words are not cut again; the index is the same either way."""
    read = _reads_back(monkeypatch)
    cut: list[bytes] = []
    real = sqlite_search.indexed_text

    def counting(data: bytes) -> str:
        cut.append(data)
        return real(data)

    monkeypatch.setattr(sqlite_search, "indexed_text", counting)
    monkeypatch.setattr(sqlite_search, "HANDOFF_ROW_BYTES", 600)
    monkeypatch.setattr(sqlite_search, "HANDOFF_BYTES", 2000)
    store.create_session("s")
    store.append("s", [Message.user(f"small kiwi {k}") for k in range(5)])
    store.append("s", [Message.user("kiwi " * 200)])  # ~1 KB: not handed off
    store.append("s", [Message.user(f"{'pad ' * 100} kiwi {k}") for k in range(6)])
    assert store._handoff_bytes <= 2000
    handed = len(store._handoff)
    assert 5 <= handed < 11  # the first five, and some of the 400-byte rows
    assert len(store.search("kiwi", limit=100).items) == 12
    num = store._conn.execute("SELECT num FROM search_sessions").fetchone()[0]
    read_seqs = sorted({at - (num << 32) for at in read})
    assert read_seqs == list(range(5, 12)), read_seqs  # from the first row not handed off
    assert sorted(cut) == sorted(r.data for r in store._b_rows("default", "s", 0, 12))  # once each
    assert store._handoff_bytes == 0
    assert_index_matches_rows(store)


def test_a_row_handed_off_before_another_store_replaced_it_is_read_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another connection pops a row that is still pending and appends another in its
    place (the same rowid): the row handed off before is stale, and the indexer reads
    the row that is there (``PRAGMA data_version`` told it another connection wrote)."""
    read = _reads_back(monkeypatch)
    first = SQLiteStore(tmp_path / "two.db", counter="approx")
    second = SQLiteStore(tmp_path / "two.db", counter="approx")
    try:
        first.create_session("s")
        first.append("s", [Message.user("apricot")])  # handed off in first
        second.pop("s")
        second.append("s", [Message.user("blueberry")])  # the same position
        assert [h.message.text for h in first.search("blueberry").items] == ["blueberry"]
        assert first.search("apricot").items == []
        assert len(set(read)) == 1
        assert_index_matches_rows(first)
    finally:
        first.close()
        second.close()


def test_a_row_handed_off_before_this_store_replaced_it_is_read_back(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same in one store: a pending row handed off, popped, and another appended in
    its place inside a transaction of the caller (which hands nothing off): the pop
    made the handed-off row stale (``_rows_changed``)."""
    read = _reads_back(monkeypatch)
    store.create_session("s")
    store.append("s", [Message.user("apricot")])
    store.pop("s")
    with store.atomic():
        store.append("s", [Message.user("blueberry")])
    assert [h.message.text for h in store.search("blueberry").items] == ["blueberry"]
    assert store.search("apricot").items == []
    assert len(set(read)) == 1
    assert_index_matches_rows(store)


def test_every_path_that_removes_rows_keeps_the_index_exact(store: SQLiteStore) -> None:
    for s in ("a", "b", "c", "d"):
        store.create_session(s, user="gone" if s == "d" else None, ttl=3600 if s == "c" else None)
        store.append(s, [Message.user(f"{s} papaya {k}") for k in range(4)])
    store.search("papaya")  # indexed; what follows is pending until the next search
    store.append("a", [Message.user("pending papaya")])
    first = store.range("a")[1]
    store.pop("a")  # a pending row
    store.pop("a")  # an indexed row
    store.append("a", [Message.user("guava in its place")])  # the popped position again
    edited = store.edit("a", first.id, Message.user("edited mango"))
    fork = store.fork("b", new_session_id="b-fork")
    store.append(fork.id, [Message.user("fork papaya")])
    store.clear("b-fork")
    store.delete_session("b", cascade=True)
    store.erase(tenant="default", user="gone")
    expired = store._b_get_session("default", "c")
    assert expired is not None
    store._b_save_session(msgspec.structs.replace(
        expired, version=expired.version + 1, expires_at=store.now() - timedelta(minutes=1)),
        expired.version)
    assert store.purge_expired() == 1
    assert_index_matches_rows(store)
    store.search("x")
    assert_index_matches_rows(store)
    assert {(h.session_id, h.message.text) for h in store.search("papaya").items} == {
        ("a", "a papaya 0"), ("a", "a papaya 1"), ("a", "a papaya 2")}
    assert [h.message.text for h in store.search("guava").items] == ["guava in its place"]
    assert [h.session_id for h in store.search("mango").items] == [edited.id]
    numbered = {sid for (sid,) in store._conn.execute("SELECT session_id FROM search_sessions")}
    assert numbered == {"a", edited.id}  # deleted sessions lose their number


def test_threads_of_two_stores_writing_at_once_leave_the_index_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four threads append, pop, clear and search through two stores on one file, with
    the indexer waking every few rows: the handed-off rows, the epochs and the rows read
    back keep the index exactly the stored rows' words."""
    import random
    import threading

    monkeypatch.setattr(sqlite_search, "FLUSH_AT", 6)
    monkeypatch.setattr(sqlite_search, "BACKLOG", 20)
    stores = [SQLiteStore(tmp_path / "busy.db", counter="approx") for _ in range(2)]
    sessions = [f"s{k}" for k in range(5)]
    for sid in sessions:
        stores[0].create_session(sid)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for k in range(120):
                store, sid = rng.choice(stores), rng.choice(sessions)
                op = rng.random()
                if op < 0.65:
                    store.append(sid, [Message.user(f"w{seed}x{k}y{j} common")
                                       for j in range(rng.randint(1, 3))])
                elif op < 0.8:
                    with contextlib.suppress(Conflict):
                        store.pop(sid)
                elif op < 0.85:
                    with contextlib.suppress(Conflict):
                        store.clear(sid)
                else:
                    store.search("common")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        for store in stores:
            store.search("common")  # each indexes what it was handed and what is left
        assert pending(stores[0]) == 0
        assert_index_matches_rows(stores[0])
        texts = {m.text for sid in sessions for m in stores[1].range(sid)}
        found = {h.message.text for h in stores[1].search("common", limit=100).items}
        assert found <= texts and len(found) == min(100, len(texts))
    finally:
        for store in stores:
            store.close()


_OPS = st.lists(st.tuples(st.sampled_from(["append", "append2", "pop", "clear", "delete",
                                           "search", "fork"]),
                          st.integers(0, 2)), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_any_sequence_of_writes_leaves_the_index_exact(shared: SQLiteStore,
                                                       ops: list[tuple[str, int]]) -> None:
    tenant = uuid.uuid4().hex
    live: list[str] = []
    for k, (op, which) in enumerate(ops):
        sid = live[which % len(live)] if live else None
        if op.startswith("append") or sid is None:
            if sid is None or op == "append2":
                sid = f"s{k}"
                shared.create_session(sid, tenant=tenant)
                live.append(sid)
            shared.append(sid, [Message.user(f"w{k} common"), Message.assistant(f"v{k}")][
                :1 + which % 2], tenant=tenant)
        elif op in ("pop", "clear"):
            with contextlib.suppress(Conflict):  # refused while a fork shares the message
                getattr(shared, op)(sid, tenant=tenant)
        elif op == "delete":
            shared.delete_session(sid, tenant=tenant, cascade=True)
            live = [s for s in live if shared._b_get_session(tenant, s) is not None]
        elif op == "fork":
            live.append(shared.fork(sid, tenant=tenant).id)
        else:
            shared.search("common", tenant=tenant)
    assert_index_matches_rows(shared)
    rows = shared._conn.execute("SELECT session_id, seq FROM messages WHERE tenant = ? AND "
                                "instr(data, 'common') > 0", (tenant,)).fetchall()
    hits = shared.search("common", tenant=tenant, limit=100).items
    live_rows = {(sid, seq) for sid, seq in rows}
    assert {(h.session_id, h.seq) for h in hits} == live_rows


# ---------------------------------------------------------------- search=off, stale


def test_search_off_scans_and_marks_the_index_stale(tmp_path: Path) -> None:
    path = tmp_path / "off.db"
    on = SQLiteStore(path)
    on.create_session("s")
    on.append("s", [Message.user("before off")])
    on.close()
    off = SQLiteStore.from_url(f"sqlite:///{path}?search=off")
    assert off.search_indexed is False
    assert off.search_index_state().state == "ready"  # opening alone changes nothing
    assert off._b_search("default", parse_query("off"), None, None, None, 5) is None
    page = off.search("before")
    assert page.scanned == 1 and [h.message.text for h in page.items] == ["before off"]
    off.append("s", [Message.user("written while off")])
    assert off.search_index_state().state == "stale"
    with pytest.raises(ValueError, match="search=off"):
        off.build_search_index()
    off.close()
    again = SQLiteStore(path)  # small: rebuilt on open
    assert again.search_index_state().state == "ready"
    assert [h.message.text for h in again.search("while").items] == ["written while off"]
    assert_index_matches_rows(again)
    again.close()
    for bad in ("maybe", "2"):
        with pytest.raises(ValueError, match="search"):
            SQLiteStore.from_url(f"sqlite:///{path}?search={bad}")


def test_a_store_with_other_words_does_not_write_the_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release whose tokenizer is another WORDS_VERSION rebuilds the index on open;
    a process of the older one, still running, then leaves it alone (stale)."""
    path = tmp_path / "v.db"
    old = SQLiteStore(path)
    old.create_session("s")
    old.append("s", [Message.user("old words")])
    monkeypatch.setattr(sqlite_search, "WORDS_VERSION", 2)
    new = SQLiteStore(path)
    assert new.search_index_state()[:2] == ("ready", 2)
    assert [h.seq for h in new.search("old").items] == [0]
    monkeypatch.setattr(sqlite_search, "WORDS_VERSION", 1)  # the old process writes
    old.append("s", [Message.user("more words")])
    assert old.search_index_state().state == "stale"
    assert old.search("more").scanned is not None  # not used: scans
    old.close()
    new.close()


# ---------------------------------------------------------------- building


def _old_database(path: Path, sessions: int, per_session: int) -> None:
    """A database of the schema before m004_search, with messages: written by this
    release, then its search tables and the step's record dropped (m001-m003 are as
    released)."""
    store = SQLiteStore(path, counter="approx")
    for s in range(sessions):
        tenant = "t" if s % 2 else "default"
        store.create_session(f"s{s:02}", tenant=tenant)
        store.append(f"s{s:02}", [Message.user(f"melon {s} {k}") for k in range(per_session)],
                     tenant=tenant)
    store.close()
    conn = sqlite3.connect(path)
    with conn:
        for table in ("search_words", "search_sessions", "search_dirty", "search_state"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("DELETE FROM migrations WHERE name IN ('m004_search', "
                     "'m005_search_watermarks', 'm006_search_tenant_column')")
    conn.close()


def test_the_0_1_0_golden_database_is_indexed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "golden.db"
    shutil.copy(GOLDEN, path)
    store = SQLiteStore(path, counter="approx")
    assert store.search_index_state().state == "ready"
    assert_index_matches_rows(store)
    assert len(index_content(store)) >= 20
    assert store._b_search("default", parse_query("done"), None, None, None, 5)
    store.close()


def test_an_existing_database_is_indexed_in_resumable_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.db"
    _old_database(path, sessions=6, per_session=5)
    monkeypatch.setattr(sqlite_module, "AUTO_BUILD_ROWS", 4)  # too large to build on open
    store = SQLiteStore(path, counter="approx")
    assert store.search_index_state().state == "building"
    assert store._b_search("default", parse_query("melon"), None, None, None, 5) is None
    assert store.search("melon", limit=100).scanned == 15  # scans meanwhile: all found
    calls: list[tuple[int, int]] = []

    class Stop(Exception):
        pass

    def stop_after_two(done: int, total: int) -> None:
        calls.append((done, total))
        if len(calls) == 2:
            raise Stop

    with pytest.raises(Stop):  # a crash mid-way
        store.build_search_index(batch=7, progress=stop_after_two)
    assert calls == [(7, 30), (14, 30)]
    state = store.search_index_state()
    assert state.state == "building" and state.done == 14 and state.position is not None
    # writes meanwhile, behind the position and ahead of it
    store.append("s00", [Message.user("melon behind")])
    store.pop("s05", tenant="t")
    store.append("s04", [Message.user("melon ahead")])
    store.delete_session("s02")
    store.close()
    resumed = SQLiteStore(path, counter="approx")
    calls.clear()
    indexed = resumed.build_search_index(batch=7, progress=lambda d, t: calls.append((d, t)))
    assert resumed.search_index_state().state == "ready"
    # 16 rows were left after the position: s04's last and the one appended ahead of
    # it, and tenant t's (one popped)
    assert calls == [(21, 30), (28, 30), (30, 30)] and indexed == 16
    resumed.search("flush")
    assert_index_matches_rows(resumed)
    assert len(resumed.search("melon", limit=100).items) == 12  # s00 and s04, 6 each
    assert len(resumed.search("melon", limit=100, tenant="t").items) == 14
    assert resumed.search("melon", limit=100).scanned is None
    resumed.close()


def test_chathistory_migrate_builds_the_index_with_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cli.db"
    _old_database(path, sessions=3, per_session=4)
    monkeypatch.setattr(sqlite_module, "AUTO_BUILD_ROWS", 2)
    monkeypatch.setattr(sqlite_search, "BUILD_BATCH", 5)
    monkeypatch.delenv("CHATHISTORY_STORE", raising=False)
    assert main(["migrate", "--store", f"sqlite:///{path}"]) == 0
    captured = capsys.readouterr()
    assert "applied m004_search" in captured.out
    assert "search index: built, 12 rows indexed now" in captured.out
    assert "search index: 12 of 12 rows" in captured.err
    store = SQLiteStore(path)
    assert store.search_index_state().state == "ready"
    assert len(store.search("melon", tenant="t").items) == 4
    store.close()
    assert main(["migrate", "--json", "--store", f"sqlite:///{path}"]) == 0
    assert '"search_index_built_now": 0' in capsys.readouterr().out


# ---------------------------------------------------------------- the words are pinned


SAMPLE = [
    Message.user("The Café opens at nine; naïve ÜBER-test_case x1 2024 東京 ﬁle e\u0301t"),
    Message(role="assistant", parts=[
        Reasoning(text="hidden reasoning"), TextPart(text="Visible answer"),
        ToolCall(id="c1", name="get_weather", arguments={"city": "Lisbon", "days": 3,
                                                        "units": ["C"], "x": None})]),
    Message(role="tool", parts=[ToolResult(call_id="c1", content=[TextPart(text="sunny")])]),
    Message(role="user", parts=[AudioPart(url="https://example.invalid/a.wav",
                                          transcript="spoken words"),
                                FilePart(url="https://example.invalid/r.pdf",
                                         name="report-2024.pdf")]),
]


PINNED_DIGEST = "0cd25cc74e19454e"
"""Of the words of SAMPLE: 'the cafe opens at nine naive uber test case x1 2024 東京 file
et', 'visible answer get weather city lisbon days 3 units c x', 'sunny', 'spoken words
report 2024 pdf'."""


def test_the_indexed_words_are_pinned_to_words_version() -> None:
    """If this fails, ``search_text`` or ``words`` find other words in stored messages:
    raise ``sqlite_search.WORDS_VERSION`` (an index of the old words is rebuilt, never
    written with the new ones) and record the new digest here."""
    from chathistory.model.codec import encode

    found = [index_words(encode(m)) for m in SAMPLE]
    digest = hashlib.sha256("\n".join(found).encode()).hexdigest()[:16]
    assert (sqlite_search.WORDS_VERSION, digest) == (1, PINNED_DIGEST), found


# ASCII with a few characters that are not: inside words or not, marks, a ligature, a
# compatibility capital and sigma, a circled digit, a trademark sign (a word once folded)
_MOSTLY_ASCII = st.text(st.sampled_from(list("aZ 9_-.'\n") + list(
    "\u2019\u201c\u2014\u00e9\u03a3\u2140\u00df\u0301\u01c5\u2460\u2122\ufb01\U0001f600\u4e2d")))


@settings(max_examples=500, deadline=None)
@given(text=st.text(st.characters(max_codepoint=127)) | st.text() | _MOSTLY_ASCII)
def test_the_fast_cut_of_ascii_text_is_words(text: str) -> None:
    """``words``' fast paths (ASCII text; folded text whose other characters are all
    outside words) cut as its regex over the folded text does."""
    assert words(text) == search._WORD.findall(search._fold(text))


@pytest.fixture(scope="module")
def fts_table() -> Iterator[sqlite3.Connection]:
    """An FTS5 table made as the index's, and its tokens by position."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(words, tenant, content='', "
                 "tokenize='ascii', detail=full)")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    try:
        yield conn
    finally:
        conn.close()


@settings(max_examples=500, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(max_codepoint=127)) | st.text() | _MOSTLY_ASCII)
def test_fts5_cuts_the_indexed_text_into_words(fts_table: sqlite3.Connection,
                                               text: str) -> None:
    """The ``words`` column is given ASCII text as it is, for FTS5's ascii tokenizer to
    cut (and other text as its words joined by spaces): the tokens it holds are exactly
    ``words``, in order (a change to ``words`` that cuts ASCII otherwise fails here)."""
    with fts_table:
        fts_table.execute("INSERT INTO t (rowid, words, tenant) VALUES (1, ?, 'tok')",
                          (sqlite_search.fts_text(text),))
        tokens = [term for term, in fts_table.execute(
            "SELECT term FROM v WHERE col = 'words' ORDER BY offset")]
        fts_table.execute("INSERT INTO t (t) VALUES ('delete-all')")
    assert tokens == words(text)


def test_a_rows_words_are_read_from_fts5s_sizes_of_it(fts_table: sqlite3.Connection) -> None:
    """``fts_words`` decodes the first of FTS5's sizes of a row (a varint of one to three
    bytes) into the row's words: the count the score damps by."""
    counts = [0, 1, 127, 128, 129, 300, 16_383, 16_384, 16_385, 100_000, 200_000]
    sqlite_search.register_functions(fts_table)
    with fts_table:
        fts_table.executemany("INSERT INTO t (rowid, words, tenant) VALUES (?, ?, 'tok')",
                              [(k + 1, " ".join(["w"] * n)) for k, n in enumerate(counts)])
        sizes = [sz for (sz,) in fts_table.execute("SELECT sz FROM t_docsize ORDER BY id")]
        decoded = [n for (n,) in fts_table.execute(
            "SELECT chathistory_fts_words(sz) FROM t_docsize ORDER BY id")]
        fts_table.execute("INSERT INTO t (t) VALUES ('delete-all')")
    assert [sqlite_search.fts_words(sz) for sz in sizes] == counts
    assert decoded == counts


def test_a_text_of_many_distinct_characters_is_folded_without_testing_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``_CUTS_ONLY_CHARS`` distinct characters that are not ASCII, a text goes
    the folding way without a fold per character (which a text made of thousands of
    symbols would cost): the same words, no character tested."""
    tested: list[str] = []
    real = search._cuts_only
    monkeypatch.setattr(search, "_cuts_only", lambda c: tested.append(c) or real(c))
    symbols = "".join(chr(0x2190 + k) for k in range(search._CUTS_ONLY_CHARS + 1))  # arrows
    text = f"alpha {symbols} beta"
    assert words(text) == ["alpha", "beta"] == search._WORD.findall(search._fold(text))
    assert tested == []
    few = f"alpha {symbols[:search._CUTS_ONLY_CHARS]} beta"
    assert words(few) == ["alpha", "beta"] and len(tested) == search._CUTS_ONLY_CHARS


def test_every_character_that_is_not_ascii_cuts_as_the_folded_regex_does() -> None:
    """Each code point that is not ASCII (below U+30000, surrogates too), between and
    beside letters and digits, alone and doubled: ``words`` (whose fast path makes a
    character that only cuts words a cut, ``_cuts_only``) cuts as the regex over the
    folded text does."""
    slow = 0
    for cp in range(0x80, 0x30000):
        char = chr(cp)
        text = f"Ab{char}cd {char}{char}9{char}"
        expected = search._WORD.findall(search._fold(text))
        assert words(text) == expected, (hex(cp), words(text), expected)
        slow += not search._cuts_only(char)
    assert 100_000 < slow < 0x30000 - 1_000  # both paths taken


@settings(max_examples=300, deadline=None)
@given(text=st.text() | st.text(st.characters(categories=("Mn", "Mc", "Me", "Lu", "Ll")))
       | _MOSTLY_ASCII)
def test_the_fold_drops_exactly_the_combining_marks(text: str) -> None:
    """``_fold``'s translation table drops what testing each character drops."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    expected = "".join(c for c in decomposed if not unicodedata.combining(c)).lower()
    assert search._fold(text) == (text.lower() if text.isascii() else expected)


def test_the_combining_marks_table_covers_every_code_point() -> None:
    marks = {cp for cp in range(sys.maxunicode + 1) if unicodedata.combining(chr(cp))}
    assert set(search._combining_marks()) == marks


def test_query_plans_stay_on_the_index(store: SQLiteStore) -> None:
    store.create_session("s")
    store.append("s", [Message.user("plan words")])
    params = {"match": '"x"', "tenant": "default", "user": "u", "candidates": 10, "limit": 5,
              "score": 1.0, "session_id": "s", "seq": 0}
    for user in (False, True):
        sql = sqlite_search._RANKED.format(
            candidates=sqlite_search._CANDIDATES.format(
                user_join=sqlite_search._USER_JOIN if user else "",
                user=sqlite_search._USER if user else ""),
            after=sqlite_search._AFTER, row=SQLiteStore.row_columns)
        plan = [row[3] for row in store._conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        # newest first (M2: the MATCH is on the table's hidden column, after its two)
        assert "SCAN search_words VIRTUAL TABLE INDEX 192:M2" in plan, plan
        assert not any(p.split()[:2] in (["SCAN", "m"], ["SCAN", "ss"], ["SCAN", "us"],
                                         ["SCAN", "se"]) for p in plan), plan
        assert plan.count("USE TEMP B-TREE FOR ORDER BY") == 2, plan  # the candidates, then
        # the page of at most `limit` rows: never the matches themselves


def _pending(store: SQLiteStore) -> set[tuple[int, int]]:
    """The sessions' watermarks."""
    return set(store._conn.execute("SELECT num, from_seq FROM search_dirty").fetchall())


def test_an_append_reads_the_state_again_after_another_store_marked_it_stale(
        tmp_path: Path) -> None:
    """An append takes the index's state as its store's last append left it only while
    no other connection committed (``PRAGMA data_version``): after a ``search=off``
    store's write marked the index stale, this store's next append pends nothing."""
    path = tmp_path / "kept.db"
    mine, other = SQLiteStore(path, counter="approx"), SQLiteStore(
        path, counter="approx", search=False)
    try:
        mine.create_session("s")
        mine.append("s", [Message.user("one")])
        assert mine._known is not None and mine._known.state.state == "ready"
        before = _pending(mine)
        assert before
        other.append("s", [Message.user("two")])  # marks the index stale
        mine.append("s", [Message.user("three")])
        assert _pending(mine) == before
        assert mine.search_index_state().state == "stale"
        assert mine._known is not None and mine._known.state.state == "stale"
    finally:
        mine.close()
        other.close()


def test_an_append_after_another_transaction_of_its_store_reads_the_state_again(
        store: SQLiteStore) -> None:
    """What an append keeps for the next is dropped by any other transaction of the
    store: a session deleted (its number with it) and made again gets a new number,
    and its new message is found."""
    store.create_session("s")
    store.append("s", [Message.user("apricot")])
    assert store._known is not None
    old = store._known.nums[("default", "s")]
    store.delete_session("s")
    assert store._known is None
    store.create_session("s")
    store.append("s", [Message.user("blueberry")])
    assert store._known is not None and store._known.nums[("default", "s")] != old
    assert [h.message.text for h in store.search("blueberry").items] == ["blueberry"]
    assert store.search("apricot").items == []
    assert_index_matches_rows(store)


def test_appends_inside_a_transaction_of_the_caller_keep_nothing(store: SQLiteStore) -> None:
    store.create_session("s")
    with store.atomic():
        store.append("s", [Message.user("one")])
        store.append("s", [Message.user("two")])
    assert store._known is None
    store.append("s", [Message.user("three")])
    assert store._known is not None and len(store._known.nums) == 1
    assert [h.message.text for h in store.search("two").items] == ["two"]


# ---------------------------------------------------------------- the watermarks


def test_a_burst_of_appends_writes_the_session_watermark_once(store: SQLiteStore) -> None:
    """An append writes a session's watermark only when the session turns from indexed
    to not: ten appends write it once (one statement), and once the rows are indexed the
    next append writes it again (at its own position)."""
    conn = store._conn
    statements: list[str] = []
    conn.set_trace_callback(statements.append)

    def writes() -> int:
        return sum(1 for sql in statements if sql.startswith("INSERT OR IGNORE INTO "
                                                             "search_dirty"))

    store.create_session("s")
    for k in range(10):
        store.append("s", [Message.user(f"plum {k}")])
    assert writes() == 1
    assert store._conn.execute("SELECT from_seq FROM search_dirty").fetchall() == [(0,)]
    assert len(store.search("plum", limit=20).items) == 10  # indexed: the watermark goes
    assert store._conn.execute("SELECT count(*) FROM search_dirty").fetchone()[0] == 0
    store.append("s", [Message.user("plum 10")])
    assert writes() == 2
    assert store._conn.execute("SELECT from_seq FROM search_dirty").fetchall() == [(10,)]
    assert_index_matches_rows(store)


def test_the_per_row_list_of_an_older_database_becomes_watermarks(tmp_path: Path) -> None:
    """A database of m004 (a row per message left to index) whose list is not a suffix
    of its session (a row handed off after one that was not could be indexed first)
    opens with a watermark at each session's first listed row, the later rows taken out
    of the index, and the index exact once the next search has indexed them."""
    path = tmp_path / "m004.db"
    store = SQLiteStore(path, counter="approx")
    store.create_session("a")
    store.create_session("b", tenant="t")
    store.append("a", [Message.user(f"quince {k}") for k in range(6)])
    store.append("b", [Message.user(f"quince {k}") for k in range(3)], tenant="t")
    assert len(store.search("quince", limit=20).items) == 6  # all indexed
    nums = dict(store._conn.execute("SELECT session_id, num FROM search_sessions"))
    store.close()
    conn = sqlite3.connect(path)
    with conn:  # as m004 left it: rows 2 and 4 of "a" and row 1 of "b" listed, not indexed
        conn.execute("CREATE TABLE search_pending (id INTEGER PRIMARY KEY)")
        for sid, tenant, seq in (("a", "default", 2), ("a", "default", 4), ("b", "t", 1)):
            at = nums[sid] << 32 | seq
            data = conn.execute("SELECT data FROM messages WHERE tenant = ? AND session_id = ? "
                                "AND seq = ?", (tenant, sid, seq)).fetchone()[0]
            conn.execute("INSERT INTO search_words (search_words, rowid, words, tenant) "
                         "VALUES ('delete', ?, ?, ?)", (at, sqlite_search.indexed_text(data),
                                                        sqlite_search.tenant_token(tenant)))
            conn.execute("INSERT INTO search_pending (id) VALUES (?)", (at,))
        conn.execute("DROP TABLE search_dirty")
        conn.execute("DELETE FROM migrations WHERE name = 'm005_search_watermarks'")
    conn.close()
    store = SQLiteStore(path, counter="approx")
    try:
        marks = set(store._conn.execute("SELECT num, from_seq FROM search_dirty"))
        assert marks == {(nums["a"], 2), (nums["b"], 1)}
        assert sqlite3.connect(path).execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'search_pending'").fetchone() == (0,)
        assert_index_matches_rows(store)  # rows 3 and 5 of "a" and 2 of "b" out, for now
        assert len(store.search("quince", limit=20).items) == 6
        assert len(store.search("quince", limit=20, tenant="t").items) == 3
        assert_index_matches_rows(store)
        assert store._conn.execute("SELECT count(*) FROM search_dirty").fetchone()[0] == 0
    finally:
        store.close()


def test_an_index_of_prefixed_words_is_built_again_with_the_tenant_column(
        tmp_path: Path) -> None:
    """A database of m005 (each word carried its tenant's prefix, one column) opens with
    the table made again in two columns and, small as it is, built on open: searches
    find every row, within their tenant, from the index alone."""
    path = tmp_path / "m005.db"
    store = SQLiteStore(path, counter="approx")
    for tenant in ("default", "t"):
        store.create_session("a", tenant=tenant)
        store.append("a", [Message.user(f"quince {tenant} {k}") for k in range(4)],
                     tenant=tenant)
    store.close()
    conn = sqlite3.connect(path)
    with conn:  # as m005 left it: the one-column table of prefixed words
        conn.execute("DROP TABLE search_words")
        conn.execute("CREATE VIRTUAL TABLE search_words USING fts5(words, content='', "
                     "tokenize='ascii', detail=full)")
        conn.execute("INSERT INTO search_words (rowid, words) VALUES (?, ?)",
                     (1 << 32, "tabcdefghijkquince"))
        conn.execute("INSERT OR REPLACE INTO search_dirty (num, from_seq) VALUES (1, 3)")
        conn.execute("DELETE FROM migrations WHERE name = 'm006_search_tenant_column'")
    conn.close()
    store = SQLiteStore(path, counter="approx")
    try:
        assert store.search_index_state().state == "ready"
        columns = [r[1] for r in store._conn.execute("PRAGMA table_info(search_words)")]
        assert columns == ["words", "tenant"]
        assert store._conn.execute("SELECT count(*) FROM search_dirty").fetchone() == (0,)
        assert_index_matches_rows(store)
        for tenant in ("default", "t"):
            hits = store._b_search(tenant, parse_query("quince"), None, None, None, 10)
            assert hits is not None
            assert sorted(row.seq for _s, _sid, _seq, row in hits) == [0, 1, 2, 3]
            assert {h.message.text.split()[1] for h in store.search(
                "quince", tenant=tenant, limit=10).items} == {tenant}
    finally:
        store.close()


_CRASH_WRITER = """
import os, random, sys
from chathistory.model import Message
from chathistory.stores.sqlite import SQLiteStore
from chathistory.stores import sqlite_search
sqlite_search.FLUSH_AT, sqlite_search.BACKLOG = 7, 30
store = SQLiteStore(sys.argv[1], counter="approx")
rng = random.Random(int(sys.argv[2]))
sessions = [f"s{k}" for k in range(4)]
for sid in sessions:
    if store._b_get_session("default", sid) is None:
        store.create_session(sid)
print("ready", flush=True)
while True:
    sid = rng.choice(sessions)
    roll = rng.random()
    if roll < 0.08 and store.range(sid):
        store.pop(sid)
    elif roll < 0.1:
        store.search("fig")
    else:
        store.append(sid, [Message.user(f"fig {rng.randrange(1000)} w{rng.randrange(50)}")
                           for _ in range(rng.randrange(1, 4))])
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_process_killed_while_appending_and_indexing_leaves_the_index_exact(
        tmp_path: Path, seed: int) -> None:
    """A writer process (appends, pops, searches, its indexer thread woken every few
    rows) killed at a random moment, three times over the same file: each time the
    file opens with the rows acknowledged before, the watermarks and the index as one
    transaction left them, and the index exact once a search has indexed the rest."""
    import random
    import signal
    import subprocess

    path = tmp_path / "crash.db"
    rng = random.Random(seed)
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _CRASH_WRITER, str(path),
                                 str(seed * 10 + round_)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.2, 0.8))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        store = SQLiteStore(path, counter="approx")
        try:
            assert store._conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert_index_matches_rows(store)  # what is indexed is exact, before a flush
            rows = sum(len(store.range(f"s{k}")) for k in range(4))
            assert rows > 0
            store.search("fig")
            assert_index_matches_rows(store)
            assert store._conn.execute("SELECT count(*) FROM search_dirty").fetchone()[0] == 0
            found = store.search("fig", limit=100)
            assert len(found.items) == min(rows, 100) and found.scanned is None
        finally:
            store.close()


def test_the_store_counts_the_rows_left_and_recounts_before_it_indexes_in_an_append(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The count that wakes the indexer is the store's own: appends add to it, removals
    of rows left to index take from it; a count gone high (rows another process
    indexed) is counted again in the database before an append indexes a backlog
    itself: an append never cuts a backlog's words that is not there."""
    monkeypatch.setattr(sqlite_search, "FLUSH_AT", 1000)
    store.create_session("s")
    store.append("s", [Message.user(f"pear {k}") for k in range(5)])
    assert store._pending_count == 5 == pending(store)
    store.pop("s")
    store.pop("s")
    assert store._pending_count == 3 == pending(store)
    flushes: list[int] = []
    monkeypatch.setattr(store, "_flush_pending", lambda *a: flushes.append(1))
    store._pending_count = sqlite_search.BACKLOG + 100
    store.append("s", [Message.user("pear 3")])
    assert flushes == [] and store._pending_count == 4 == pending(store)
