"""Search on every backend (issue 22): the same messages found as the reference (the
query language applied to each message's words in Python), scoped to the tenant by
construction, paged without loss, and gone with what is deleted."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory.errors import InvalidArgument, NotFound
from chathistory.model import Message, TextPart, ToolCall, ToolResult
from chathistory.stores import BaseStore
from chathistory.stores.search import (
    Query,
    parse_query,
    row_test,
    search_text,
    snippet,
    words,
)

VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
         "sierra", "tango", "café", "Über", "naïve", "x1", "2024"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 12)))


def _all_hits(store: BaseStore, query: str, **scope: object) -> list[tuple[str, int]]:
    """Every hit, following cursors with small pages."""
    out: list[tuple[str, int]] = []
    cursor = None
    for _ in range(1000):
        page = store.search(query, limit=3, cursor=cursor, **scope)  # type: ignore[arg-type]
        out.extend((h.session_id, h.seq) for h in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return out
    raise AssertionError("cursor never ended")


def _reference(texts: dict[tuple[str, int], str], query: str) -> set[tuple[str, int]]:
    parsed = parse_query(query)
    return {key for key, text in texts.items() if parsed.matches(words(text))}


def test_finds_what_the_reference_finds_and_pages_without_loss(store: BaseStore) -> None:
    rng = random.Random(22)
    texts: dict[tuple[str, int], str] = {}
    for s in range(6):
        sid = f"s{s}"
        store.create_session(sid)
        batch = [Message.user(_text(rng)) if k % 2 == 0 else Message.assistant(_text(rng))
                 for k in range(rng.randint(3, 9))]
        store.append(sid, batch)
        texts.update({(sid, k): m.text for k, m in enumerate(batch)})
    queries = ["alpha", "ALPHA bravo", "cafe", "uber", "naive", "x1", "2024", "jul*",
               '"alpha bravo"', "nothingatall", "ca*", "Golf hotel india"]
    for q in queries:
        got = _all_hits(store, q)
        assert len(got) == len(set(got)), q  # no hit twice across pages
        assert set(got) == _reference(texts, q), q


def test_a_search_never_leaves_its_tenant(store: BaseStore) -> None:
    store.create_session("mine", tenant="t1")
    store.create_session("theirs", tenant="t2")
    store.create_session("mine", tenant="t2")  # the same id in another tenant
    store.append("mine", [Message.user("shared word zebra")], tenant="t1")
    store.append("theirs", [Message.user("secret zebra giraffe")], tenant="t2")
    store.append("mine", [Message.user("other zebra okapi")], tenant="t2")
    hits = store.search("zebra", tenant="t1").items
    assert [(h.session_id, h.message.text) for h in hits] == [("mine", "shared word zebra")]
    assert store.search("giraffe", tenant="t1").items == []
    assert store.search("okapi", tenant="t1").items == []
    assert store.search("zebra", tenant="t1", session_id="mine").items[0].message.text == (
        "shared word zebra")
    with pytest.raises(NotFound):
        store.search("zebra", tenant="t1", session_id="theirs")
    assert store.search("zebra").items == []  # the default tenant has nothing


def test_user_session_and_metadata_narrow_it(store: BaseStore) -> None:
    store.create_session("a", user="ann", metadata={"project": "x"})
    store.create_session("b", user="bob", metadata={"project": "y"})
    store.append("a", [Message.user("kiwi one"), Message.assistant("kiwi two")])
    store.append("b", [Message.user("kiwi three")])
    assert {h.session_id for h in store.search("kiwi").items} == {"a", "b"}
    assert {h.message.text for h in store.search("kiwi", user="bob").items} == {"kiwi three"}
    assert {h.session_id for h in store.search("kiwi", metadata={"project": "x"}).items} == {"a"}
    assert store.search("kiwi", metadata={"project": "z"}).items == []
    assert {h.seq for h in store.search("kiwi", session_id="a").items} == {0, 1}
    assert store.search("kiwi", session_id="a", user="bob").items == []


def test_a_fork_finds_its_shared_prefix(store: BaseStore) -> None:
    store.create_session("root")
    first = Message.user("mango first")
    store.append("root", [first, Message.assistant("mango second")])
    store.fork("root", first.id, new_session_id="fork")
    store.append("fork", [Message.user("mango in the fork")])
    store.append("root", [Message.user("mango later in root")])
    hits = store.search("mango", session_id="fork").items
    assert sorted((h.session_id, h.seq) for h in hits) == [("fork", 1), ("root", 0)]


def test_deleted_truncated_and_expired_messages_are_not_found(store: BaseStore) -> None:
    store.create_session("gone")
    store.create_session("cut")
    store.create_session("old", ttl=3600)
    store.create_session("cleared")
    store.append("gone", [Message.user("papaya")])
    store.append("cut", [Message.user("papaya kept"), Message.assistant("papaya cut")])
    store.append("old", [Message.user("papaya old")])
    store.append("cleared", [Message.user("papaya cleared")])
    assert len(store.search("papaya").items) == 5
    store.delete_session("gone")
    store.pop("cut")
    store.clear("cleared")
    found = {h.message.text for h in store.search("papaya").items}
    assert found == {"papaya kept", "papaya old"}
    found_session = store._b_get_session("default", "old")
    assert found_session is not None
    past = msgspec.structs.replace(found_session, version=found_session.version + 1,
                                   expires_at=store.now() - timedelta(minutes=1))
    assert store._b_save_session(past, found_session.version)
    assert {h.message.text for h in store.search("papaya").items} == {"papaya kept"}
    # a message appended after a pop takes the popped position: found as itself
    store.append("cut", [Message.user("guava now")])
    assert [h.message.text for h in store.search("guava").items] == ["guava now"]
    assert store.search("cut", session_id="cut").items == []


def test_what_a_message_is_found_by() -> None:
    m = Message(role="assistant", parts=[ToolCall(id="c1", name="get_weather",
                                                  arguments={"city": "Lisbon"})])
    r = Message(role="tool", parts=[ToolResult(call_id="c1", content="sunny in Lisbon")])
    assert words(search_text(m)) == ["get", "weather", "city", "lisbon"]
    assert words(search_text(r)) == ["sunny", "in", "lisbon"]


def test_tool_calls_and_results_are_found(store: BaseStore) -> None:
    store.create_session("t")
    store.append("t", [
        Message.user("weather?"),
        Message(role="assistant", parts=[ToolCall(id="c1", name="get_weather",
                                                  arguments={"city": "Reykjavik"})]),
        Message(role="tool", parts=[ToolResult(call_id="c1", content="snow in Reykjavik")])])
    assert sorted(h.seq for h in store.search("reykjavik").items) == [1, 2]


def test_snippet_marks_the_matched_words() -> None:
    text = "word " * 60 + "The Café opens at nine. " + "tail " * 60
    cut, marks = snippet(text, parse_query("cafe nine"))
    assert cut.startswith("…") and cut.endswith("…")
    assert [cut[s:e] for s, e in marks] == ["Café", "nine"]
    cut, marks = snippet("ünïcode Naïve text", parse_query("naive"))
    assert [cut[s:e] for s, e in marks] == ["Naïve"]


@pytest.mark.parametrize("bad", ["", "   ", "***", '""', " ".join(["w"] * 17)])
def test_a_query_without_words_or_with_too_many_is_refused(store: BaseStore, bad: str) -> None:
    with pytest.raises(InvalidArgument, match="q"):
        store.search(bad)


def test_bad_limit_and_cursor_are_refused(store: BaseStore) -> None:
    with pytest.raises(InvalidArgument, match="limit"):
        store.search("x", limit=0)
    with pytest.raises(InvalidArgument, match="cursor"):
        store.search("x", cursor="not-a-cursor")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=4),
       st.floats(allow_nan=False, allow_infinity=False), st.data())
def test_the_byte_test_never_drops_a_match(texts: list[str], number: float,
                                           data: st.DataObject) -> None:
    """``row_test`` (the scans' test on stored bytes) is true for every row that
    matches: a query made of the row's own words, or their prefixes, always passes."""
    message = Message(role="assistant", parts=[
        *(TextPart(text=t) for t in texts),
        ToolCall(id="c", name="f", arguments={"x": number, "s": texts[0]})])
    found = words(search_text(message))
    if not found:
        return
    picked = data.draw(st.lists(st.sampled_from(found), min_size=1, max_size=3))
    query = parse_query(" ".join(w[:max(1, len(w) // 2)] + "*" if k % 2 else w
                                 for k, w in enumerate(picked)))
    assert query.matches(found)
    test = row_test(query)
    assert test is None or test(msgspec.json.encode(message))


def test_the_byte_test_drops_rows_without_the_words() -> None:
    test = row_test(parse_query("zebra"))
    assert test is not None
    assert not test(msgspec.json.encode(Message.user("a horse")))
    assert test(msgspec.json.encode(Message.user("A ZEBRA")))
    assert test(msgspec.json.encode(Message.user("zébra")))  # folds to zebra


def test_the_byte_test_leaves_numbers_to_the_decoded_match() -> None:
    """A float argument is stored as msgspec writes it (``0.000015``) and found by
    the words Python writes (``1.5e-05``): such words are not tested on the bytes."""
    message = Message(role="assistant", parts=[
        ToolCall(id="c", name="f", arguments={"rate": 1.5e-05, "n": 1e-7})])
    for q in ("5e 05", "1e", "07"):
        query = parse_query(q)
        assert query.matches(words(search_text(message))), q
        test = row_test(query)
        assert test is None or test(msgspec.json.encode(message)), q


def test_a_match_near_the_end_keeps_the_room_before_it() -> None:
    text = "word " * 80 + "the last word is zebra"
    cut, marks = snippet(text, parse_query("zebra"), chars=160)
    assert cut.startswith("…") and cut.endswith("zebra")
    assert len(cut) >= 150
    assert [cut[s:e] for s, e in marks] == ["zebra"]


def _reference_snippet(text: str, query: Query, chars: int) -> tuple[str, list[tuple[int, int]]]:
    """The snippet as first written: every word of the text cut, every match marked,
    then the window taken (slow on long messages, plainly right)."""
    spans = [(m.start(), m.end(), "".join(words(m.group())))
             for m in re.finditer(r"[^\W_]+", text)]
    found = [w for _s, _e, w in spans]
    marked: set[tuple[int, int]] = set()
    for term in query.terms:
        n = len(term.words)
        for i in range(len(found) - n + 1):
            if query.__class__(query.text, (term,)).matches(found[i:i + n]) and (
                    found[i:i + n - 1] == list(term.words[:-1])):
                marked.update((spans[k][0], spans[k][1]) for k in range(i, i + n))
    if not marked:
        return text[:chars] + ("…" if len(text) > chars else ""), []
    first = min(marked)[0]
    lo = max(0, min(first - chars // 3, len(text) - chars))
    hi = min(len(text), lo + chars)
    if lo > 0:
        space = text.find(" ", lo - 1, first)
        lo = space + 1 if 0 <= space - lo < 20 else lo
    if hi < len(text):
        space = text.find(" ", hi)
        hi = space if 0 <= space - hi < 20 else hi
    head = "…" if lo > 0 else ""
    out = head + text[lo:hi].replace("\n", " ") + ("…" if hi < len(text) else "")
    shift = len(head) - lo
    return out, [(s + shift, e + shift) for s, e in sorted(marked) if s >= lo and e <= hi]


SNIPPET_WORDS = ["alpha", "bravo", "Café", "naïve", "zebra", "xzebra", "x1", "the", "word,",
                 "end.\n", "Über", "alphabet", "zebras",
                 # characters that only cut words (the ASCII way of finding the first match)
                 "“zebra”", "x\u2019zebra", "—", "alpha🙂bravo", "İ",
                 # letters that fold (found piece by piece in text that holds them)
                 "\u00bd", "\ufb01le", "e\u0301te", "ete", "ΣΑΣ"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(SNIPPET_WORDS), min_size=1, max_size=120),
       st.sampled_from(["zebra", "alpha bravo", '"alpha bravo"', "caf*", "naive", "uber x1",
                        "nomatch", '"the word"', "zeb*", "alpha*", "file", "ete", "12",
                        "σας"]),
       st.integers(20, 200))
def test_the_snippet_is_the_reference_snippet(picked: list[str], q: str, chars: int) -> None:
    text = " ".join(picked)
    query = parse_query(q)
    assert snippet(text, query, chars) == _reference_snippet(text, query, chars)


def test_a_compatibility_capital_folds_to_a_lowercase_word() -> None:
    assert words("\u1d2cbc \uff26\uff55\uff4c\uff4c") == ["abc", "full"]
    assert parse_query("\u1d2cBC").matches(words("abc"))


def test_an_index_holds_the_words_of_a_message_up_to_the_cut() -> None:
    from chathistory.stores.search import INDEX_CHARS, indexed_words

    head = "early " * 10
    text = head + "filler " * (INDEX_CHARS // 7) + "late"
    found = indexed_words(msgspec.json.encode(Message.user(text)))
    assert found[0] == "early" and "late" not in found
    assert len(" ".join(found)) <= INDEX_CHARS
    assert indexed_words(msgspec.json.encode(Message.user("a late word"))) == ["a", "late", "word"]
