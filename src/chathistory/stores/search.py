"""Word search over a tenant's messages: the query language, the words a message is
indexed under, snippets, and the engine's ``search``.

One tokenizer serves every backend, so a query finds the same messages on all of
them (``tests/stores/test_search_contract.py`` checks each against the in-memory
reference): a message's searchable text (``search_text``: its text parts, tool
call names and arguments, tool results, audio transcripts and file names; not
reasoning or compaction blobs) is cut into words, runs of letters and digits
(``[^\\W_]+``), lowercased, with diacritics removed (``café`` is ``cafe``). The
backends index those words: SQLite in an FTS5 table, PostgreSQL in a ``tsvector``
with a GIN index, both written in the append's transaction (a searchable message
is an acknowledged one; a deleted or truncated one leaves the index with it).
Redis without modules has no index: ``search`` there scans the newest messages
of the tenant, at most ``search_scan_limit`` of them, and says so in the page
(``SearchPage.scanned``).

The query (``parse_query``): words, all of which must occur in a message (in any
order); ``"quoted words"`` must occur one after the other; a word ending in ``*``
matches every word it begins. Everything that is not a letter or digit separates
words, as in the text, so ``tool_call`` is the phrase ``"tool call"``.
"""

from __future__ import annotations

import base64
import functools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from ..errors import InvalidArgument
from ..model import Message
from ..model.b64 import decode_base64
from ..model.parts import AudioPart, FilePart, TextPart, ToolCall, ToolResult
from .backend import Span, own_span, recent_key
from .model import DEFAULT_TENANT, MESSAGE_DECODER, Row, Session
from .reads import Reads

__all__ = ["MAX_TERMS", "WORDS_VERSION", "Query", "SearchHit", "SearchPage", "Searching", "Term",
           "as_ascii", "index_words", "indexed_source", "indexed_words", "matching_rows",
           "parse_query", "rank_key", "row_test", "search_text", "snippet", "words"]

WORDS_VERSION = 1
"""The version of ``index_words`` the index holds. A release whose ``search_text`` or
``words`` find other words in the same stored message raises it: an index of other
words is rebuilt, never written (a row leaves SQLite's contentless FTS5 table only
given the very words it was indexed with; PostgreSQL re-cuts each row's words).
``tests/stores/test_search_sqlite.py`` pins the words of a sample of messages."""

MAX_TERMS = 16
"""Words a query may hold (phrase words included): more is an ``InvalidArgument``."""
MAX_LIMIT = 100
SNIPPET_CHARS = 160
"""About how long a snippet is, in characters."""

_WORD = re.compile(r"[^\W_]+")
_QUERY = re.compile(r'"([^"]*)"?|(\S+)')


@functools.cache
def _combining_marks() -> dict[int, None]:
    """``str.translate``'s table that drops every combining mark (``unicodedata.combining``
    not 0: 912 code points, all below U+30000), made at the first text that is not
    ASCII (20 ms)."""
    return dict.fromkeys(cp for cp in range(0x30000) if unicodedata.combining(chr(cp)))


def _fold(text: str) -> str:
    """Lowercase, diacritics removed (NFKD, combining marks dropped: by a translation
    table, 10x the speed of testing each character in Python, which was half the cost of
    indexing ShareGPT, whose 7% of messages that are not ASCII it spent it on). The
    table is applied to the runs of characters that are not ASCII only (an ASCII
    character is no mark): most such text is ASCII but for a quote or a dash, and a
    ``translate`` through a dict costs ~90 ns a character (164 us a ShareGPT message
    that is not ASCII, against 52 run by run)."""
    text = text.lower()
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    # lowercased again: a compatibility form may decompose to a capital (U+1D2C is A)
    return _NOT_ASCII.sub(_drop_marks, decomposed).lower()


_NOT_ASCII = re.compile(r"[^\x00-\x7f]+")


def _drop_marks(run: re.Match[str]) -> str:
    return run.group().translate(_combining_marks())


def _blank_unless_word(run: re.Match[str]) -> str:
    """A run of characters that are not ASCII, or a space if no word character is in
    it (a space cuts words as it did)."""
    found = run.group()
    return found if _WORD.search(found) else " "


_NOT_ASCII_WORD = bytes((ord(chr(b).lower()) if chr(b).isalnum() else 0x20) if b < 0x80 else b
                        for b in range(256))
"""``bytes.translate``'s table that cuts ASCII as ``words`` does: a letter lowercased, a
digit kept, anything else a space (ASCII text encoded, translated and decoded: 5.8 us a
ShareGPT message against 7.3 for ``str.lower`` and ``str.translate`` through a dict)."""


def _ascii_words(text: str) -> list[str]:
    """``words`` of ASCII text (``text.isascii()``)."""
    return text.encode("ascii").translate(_NOT_ASCII_WORD).decode("ascii").split()

_CUTS_ONLY: dict[str, bool] = {}
"""Characters that are not ASCII, seen in text: whether the character only cuts words
(``_cuts_only``); at most ``_CUTS_ONLY_MAX`` of them are kept."""
_CUTS_ONLY_MAX = 8192
_CUTS_ONLY_CHARS = 64
"""A text with more distinct characters that are not ASCII goes the folding way at once:
``_cuts_only`` folds each character it has not seen (a few us), and a text made to hold
thousands of them would cost that many folds, and fill the cache."""
_ASCII_BYTES = bytes(range(128))


def _cuts_only(char: str) -> bool:
    """Whether a character that is not ASCII is, to ``words``, only a cut between words:
    its fold holds something (a combining mark folds to nothing, and would join the
    letters around it) and no word character (nor an ASCII letter or digit that a
    compatibility form decomposes to: ``™`` folds to ``tm``). A run of such characters
    in a folded text is made a space by ``_blank_unless_word``, or is ASCII that is not
    a letter or digit: a cut either way."""
    found = _CUTS_ONLY.get(char)
    if found is None:
        folded = _fold(char)
        found = bool(folded) and _WORD.search(folded) is None
        if len(_CUTS_ONLY) < _CUTS_ONLY_MAX:
            _CUTS_ONLY[char] = found
    return found


def _not_ascii(text: str) -> set[str]:
    """The characters of ``text`` that are not ASCII (through UTF-8, whose bytes of
    ASCII ``bytes.translate`` deletes: 4.5 us a ShareGPT message that is not ASCII,
    against 28 for a regular expression's or a set's walk over the text)."""
    raw = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_BYTES)
    return set(raw.decode("utf-8", "surrogatepass"))


def as_ascii(text: str) -> str | None:
    """The ASCII text that ``words`` cuts ``text`` as, where there is one: ``text``
    itself when it is ASCII; when its characters that are not ASCII only cut words
    (``_cuts_only``), ``text`` with each of them made a ``?`` (a cut, and the offsets
    stay the text's); else None (its letters must be folded)."""
    if text.isascii():
        return text
    chars = _not_ascii(text)
    if len(chars) <= _CUTS_ONLY_CHARS and all(_cuts_only(char) for char in chars):
        return text.encode("ascii", "replace").decode("ascii")
    return None


def words(text: str) -> list[str]:
    """The words of ``text`` as search compares them, in order. ASCII text (most
    text) is cut twice as fast by lowercasing and cutting at every character that is
    not a letter or digit: the same cut (a property test checks it). Text whose
    characters that are not ASCII only cut words (quotes, dashes, emoji: ``_cuts_only``)
    has them made cuts and is cut the same way, without folding it (58% of ShareGPT's
    messages that are not ASCII: 83 -> 33 us each, 2,600 characters on average); so is
    folded text whose characters that are not ASCII are all outside words (98 us,
    against 230 for the regular expression's cut)."""
    cut_as = as_ascii(text)
    if cut_as is not None:
        return _ascii_words(cut_as)
    folded = _NOT_ASCII.sub(_blank_unless_word, _fold(text))
    if folded.isascii():
        return _ascii_words(folded)
    return _WORD.findall(folded)


def search_text(message: Message) -> str:
    """The text a message is found by, parts joined by newlines."""
    out: list[str] = []
    for p in message.parts:
        if isinstance(p, TextPart):
            out.append(p.text)
        elif isinstance(p, ToolCall):
            out.append(p.name)
            out.extend(_strings(p.arguments))
        elif isinstance(p, ToolResult):
            if isinstance(p.content, str):
                out.append(p.content)
            else:
                out.extend(c.text for c in p.content if isinstance(c, TextPart))
        elif isinstance(p, AudioPart) and p.transcript:
            out.append(p.transcript)
        elif isinstance(p, FilePart):
            name = p.name or (p.attachment.name if p.attachment else "")
            if name:
                out.append(name)
    return "\n".join(t for t in out if t)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


INDEX_CHARS = 200_000
"""An index holds the words of a message's first this many characters of search text
(cut at a space): a 9 MB paste costs an append's indexing no more than a long message
(tokenizing and indexing a million words held SQLite's writer for seconds). A search
through an index misses words past the cut; the scans read them."""


def indexed_source(data: bytes) -> str:
    """The text an index holds the words of for a stored row (``Row.data``): its search
    text, cut at ``INDEX_CHARS``."""
    text = search_text(MESSAGE_DECODER.decode(data))
    if len(text) > INDEX_CHARS:
        cut = text.rfind(" ", INDEX_CHARS // 2, INDEX_CHARS + 1)
        text = text[:cut if cut > 0 else INDEX_CHARS]
    return text


def indexed_words(data: bytes) -> list[str]:
    """The words an index holds for a stored row (``Row.data``), in order."""
    return words(indexed_source(data))


def index_words(data: bytes) -> str:
    """A stored row's words joined by spaces: what a backend indexes for ``Row.data``."""
    return " ".join(indexed_words(data))


class Term(msgspec.Struct, frozen=True):
    """One term of a query: a word, or a phrase of words (consecutive in the text);
    ``prefix``: the last word matches every word it begins."""

    words: tuple[str, ...]
    prefix: bool = False


class Query(msgspec.Struct, frozen=True):
    """A parsed query: every term must match."""

    text: str
    terms: tuple[Term, ...]

    def matches(self, found: Sequence[str]) -> bool:
        """Whether a message with these words (``words(search_text(m))``) matches."""
        return all(_term_at(t, found) for t in self.terms)

    def score(self, found: Sequence[str]) -> float:
        """The reference ranking (memory and scans): term frequency, damped by length."""
        hits = sum(len(_term_at(t, found)) for t in self.terms)
        return hits / math.sqrt(len(found) + 1)


def _term_at(term: Term, found: Sequence[str]) -> list[int]:
    """Where ``term`` starts in ``found``."""
    n = len(term.words)
    last = n - 1
    out = []
    for i in range(len(found) - n + 1):
        for k, w in enumerate(term.words):
            got = found[i + k]
            if not (got == w or (term.prefix and k == last and got.startswith(w))):
                break
        else:
            out.append(i)
    return out


_NUMERIC = re.compile(r"[0-9]+e?")


def row_test(query: Query) -> Callable[[bytes], bool] | None:
    """A test of a row's stored JSON (``Row.data``) that is true for every row whose
    message ``query`` matches, and for some others: every ASCII word of the query
    occurs in the lowercased bytes (a word of the text is a run of its letters,
    verbatim in the JSON, which escapes only quotes, backslashes and control
    characters), or, for a row holding non-ASCII text, in its folded form (an
    accented letter folds to an ASCII one). Words of digits (or digits and an ``e``)
    are not tested: a float argument is stored as ``0.000015`` and found as Python
    writes it, ``1.5e-05``. None when the query has no word to test. A row that
    passes is decoded and matched with ``Query.matches``; the test only spares the
    decoding of rows that cannot match (the scans, ``?search=off``)."""
    needles = sorted({w.encode() for t in query.terms for w in t.words
                      if w.isascii() and not _NUMERIC.fullmatch(w)}, key=len, reverse=True)
    if not needles:
        return None

    def test(data: bytes) -> bool:
        low = data.lower()  # ASCII letters only
        for needle in needles:  # the longest first: the likeliest to be missing
            if needle not in low:
                break
        else:
            return True
        if data.isascii():
            return False
        folded = unicodedata.normalize("NFKD", data.decode().lower()).lower()
        return all(n in folded.encode("ascii", "ignore") for n in needles)

    return test


def matching_rows(query: Query, rows: Iterable[Row]) -> Iterator[tuple[Row, list[str]]]:
    """The rows whose message ``query`` matches, each with its words."""
    test = row_test(query)
    for row in rows:
        if test is not None and not test(row.data):
            continue
        got = words(search_text(MESSAGE_DECODER.decode(row.data)))
        if query.matches(got):
            yield row, got


def row_matches(query: Query, row: Row) -> bool:
    """Whether ``query`` matches the row's message (``matching_rows`` of one row)."""
    return next(matching_rows(query, (row,)), None) is not None


_SWITCH = {"on": True, "true": True, "1": True, "yes": True,
           "off": False, "false": False, "0": False, "no": False}


def search_option(value: str) -> bool:
    """A store URL's ``search=`` value (``on``/``off``, or true/false, 1/0, yes/no)."""
    found = _SWITCH.get(value.lower())
    if found is None:
        raise ValueError(f"search must be on or off, not {value!r}")
    return found


def parse_query(text: str) -> Query:
    """``InvalidArgument`` (naming ``q``) for a query without a word or with more than
    ``MAX_TERMS`` words."""
    if not isinstance(text, str):
        raise InvalidArgument("q must be a string")
    terms: list[Term] = []
    for m in _QUERY.finditer(text):
        quoted, bare = m.group(1), m.group(2)
        raw = quoted if quoted is not None else bare
        prefix = raw.rstrip().endswith("*") and quoted is None
        found = words(raw)
        if found:
            terms.append(Term(tuple(found), prefix))
    count = sum(len(t.words) for t in terms)
    if not terms:
        raise InvalidArgument("q: a search needs at least one word (letters or digits)")
    if count > MAX_TERMS:
        raise InvalidArgument(f"q: at most {MAX_TERMS} words, not {count}")
    return Query(text, tuple(dict.fromkeys(terms)))


def snippet(text: str, query: Query, chars: int = SNIPPET_CHARS
            ) -> tuple[str, list[tuple[int, int]]]:
    """A piece of ``text`` around its first match, and the ``[start, end)`` offsets
    (into the snippet) of every matched word in it. ``…`` marks a cut. Words are cut
    only up to the snippet's end: a hit in a long message costs its first match."""
    spans: list[tuple[int, int, str]] = []
    marked: set[tuple[int, int]] = set()
    first: int | None = None
    for m in _WORD.finditer(text, _first_candidate(text, query)):
        if first is not None and m.start() > first + chars + 20:
            break
        word = m.group()
        spans.append((m.start(), m.end(), word.lower() if word.isascii() else _folded(word)))
        k = len(spans) - 1
        for term in query.terms:  # the terms that end at this word
            i = k - len(term.words) + 1
            if i >= 0 and _term_at(term, [w for _s, _e, w in spans[i:]]) == [0]:
                marked.update((a, b) for a, b, _w in spans[i:])
                first = spans[i][0] if first is None else min(first, spans[i][0])
    if first is None:
        cut = text[:chars]
        return (cut + ("…" if len(text) > chars else ""), [])
    # a third of the room before the first match; less after it near the end
    lo = max(0, min(first - chars // 3, len(text) - chars))
    hi = min(len(text), lo + chars)
    if lo > 0:  # start at a word (forward: the end stays where it is)
        space = text.find(" ", lo - 1, first)
        lo = space + 1 if 0 <= space - lo < 20 else lo
    if hi < len(text):  # end at a word
        space = text.find(" ", hi)
        hi = space if 0 <= space - hi < 20 else hi
    head = "…" if lo > 0 else ""
    body = text[lo:hi].replace("\n", " ")
    out = head + body + ("…" if hi < len(text) else "")
    shift = len(head) - lo
    return out, [(s + shift, e + shift) for s, e in sorted(marked) if s >= lo and e <= hi]


def _first_candidate(text: str, query: Query) -> int:
    """Where the words of ``text`` may be cut from, for its first match: in text that
    ``words`` cuts as ASCII (ASCII, or text whose characters that are not ASCII only
    cut words: quotes, dashes, emoji), the start of the word holding the earliest
    occurrence of a term's first word (no match begins before it); else the start of
    the first piece of it that may hold one (``_first_piece``). (A long message with a
    curly quote was cut word by word from its start: 1.6 ms a snippet of an
    11,000-character ShareGPT message, 0.15 ms now.)"""
    cut_as = as_ascii(text)
    if cut_as is None:
        return _first_piece(text, query)
    low = cut_as.lower()
    found = [at for at in (low.find(t.words[0]) for t in query.terms) if at >= 0]
    if not found:
        return len(text)
    at = min(found)
    while at > 0 and low[at - 1].isalnum():
        at -= 1
    return at


_PIECE_CHARS = 300


def _folded(word: str) -> str:
    """A run of word characters that is not ASCII as ``snippet`` compares it: its
    words run together (a short one cut once a process: the same runs recur through a
    message; a long one, a paste without spaces, not kept)."""
    return _folded_short(word) if len(word) <= 64 else "".join(words(word))


@functools.lru_cache(maxsize=4096)
def _folded_short(word: str) -> str:
    return "".join(words(word))


def _first_piece(text: str, query: Query) -> int:
    """``_first_candidate`` of other text: the start of the first piece of it (about
    ``_PIECE_CHARS`` long, cut at a space, which no word holds) whose folded letters and
    digits, run together, hold a term's first word; ``len(text)`` if none does. A word's
    fold is in its piece's (folding is done character by character), so no match begins
    in an earlier piece. (Cutting a long message word by word in Python up to its first
    match cost 3 ms a snippet of a 14,000-character one.)"""
    firsts = [t.words[0] for t in query.terms]
    start, end = 0, len(text)
    while start < end:
        cut = text.find(" ", start + _PIECE_CHARS)
        stop = end if cut < 0 else cut
        letters = "".join(_WORD.findall(_fold(text[start:stop])))
        if any(word in letters for word in firsts):
            return start
        start = stop
    return end


class SearchHit(msgspec.Struct, kw_only=True):
    """A message that matched: where it is, how well it matched, and what to show."""

    session_id: str
    """The session that stores the message (a fork's shared prefix is its parent's)."""
    seq: int
    message: Message
    score: float
    """Higher is better; comparable within one search, not across backends."""
    snippet: str
    marks: list[tuple[int, int]]
    """``[start, end)`` of each matched word in ``snippet``."""


class SearchPage(msgspec.Struct, kw_only=True):
    items: list[SearchHit]
    next_cursor: str | None = None
    scanned: int | None = None
    """Set when the backend has no index: how many messages the search read (the
    newest of the tenant, at most ``search_scan_limit``)."""


Cursor = tuple[float, str, int]
"""The last hit of a page: ``(score, session_id, seq)``."""


def _encode_cursor(hit: Cursor) -> str:
    raw = msgspec.json.encode(list(hit))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_MAX_SEQ = 2**63 - 1
_cursor_decoder = msgspec.json.Decoder(tuple[float, str, int])


def _decode_cursor(cursor: str) -> Cursor:
    """The position a cursor names; ``InvalidArgument`` for anything ``_encode_cursor``
    cannot have made (bad base64, other JSON, a position no column holds, a session id
    no store accepts), so that a forged cursor is the client's 400, never a driver's
    error: the decode is typed, so nesting stops at the first wrong value."""
    try:
        raw = decode_base64(cursor)  # strict: a character is never skipped
        score, session_id, seq = _cursor_decoder.decode(raw)
    except (ValueError, msgspec.DecodeError):  # (binascii.Error is a ValueError)
        score, session_id, seq = math.nan, "", -1
    if (not math.isfinite(score) or not 0 <= seq <= _MAX_SEQ or not session_id
            or len(session_id) > 200 or "\x00" in session_id):
        raise InvalidArgument("cursor: not a cursor of this search")
    return score, session_id, seq


class Searching(Reads):
    """``search``; ``Engine`` (``engine.py``) includes it."""

    search_scan_limit: int | None = None
    """For a backend without an index: how many of the tenant's newest messages a
    search reads at most (None: all of them, the in-memory reference)."""

    def search(self, query: str, *, tenant: str = DEFAULT_TENANT, user: str | None = None,
               session_id: str | None = None, metadata: Mapping[str, Any] | None = None,
               limit: int = 20, cursor: str | None = None) -> SearchPage:
        """Messages of ``tenant`` matching ``query`` (``parse_query``), best match first,
        ``limit`` to a page (``cursor``: the page's ``next_cursor``). Only the tenant's
        sessions are ever read; ``user``, ``session_id`` (its shared prefix included)
        and ``metadata`` (sessions whose metadata has those keys with those values)
        narrow it. Expired sessions are left out."""
        parsed = parse_query(query)
        if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
            raise InvalidArgument(f"limit must be 1..{MAX_LIMIT}")
        after = _decode_cursor(cursor) if cursor else None
        spans: list[Span] | None = None
        if session_id is not None:
            session = self.get_session(session_id, tenant=tenant)
            if user is not None and session.user != user:
                return SearchPage(items=[])
            spans = [(owner.id, lo, hi) for owner, lo, hi in self._segments(session)]
        now = self.now()
        sessions: dict[str, Session | None] = {}
        hits: list[SearchHit] = []
        scanned: int | None = None
        exhausted = False
        while len(hits) <= limit and not exhausted:
            want = limit + 1 - len(hits)
            found = self._b_search(tenant, parsed, spans, user, after, want)
            if found is None:
                found, scanned = self._scan_search(tenant, parsed, spans, user, after, want)
            exhausted = len(found) < want
            for score, sid, seq, row in found:
                after = (score, sid, seq)
                if sid not in sessions:
                    sessions[sid] = self._b_get_session(tenant, sid)
                s = sessions[sid]
                if s is None or s.is_expired(now) or (user is not None and s.user != user):
                    continue
                if metadata and any(s.metadata.get(k, _MISSING) != v
                                    for k, v in metadata.items()):
                    continue
                message = MESSAGE_DECODER.decode(row.data)
                text, marks = snippet(search_text(message), parsed)
                hits.append(SearchHit(session_id=sid, seq=seq, message=message, score=score,
                                      snippet=text, marks=marks))
        next_cursor = None
        if len(hits) > limit:
            last = hits[limit - 1]
            next_cursor = _encode_cursor((last.score, last.session_id, last.seq))
        return SearchPage(items=hits[:limit], next_cursor=next_cursor, scanned=scanned)

    # ------------------------------------------------------------ the scan

    def _scan_search(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                     user: str | None, after: Cursor | None, limit: int
                     ) -> tuple[list[tuple[float, str, int, Row]], int]:
        """``_b_search`` by reading rows: every own row of the spans, or the tenant's
        sessions newest first until ``search_scan_limit`` rows were read."""
        budget = self.search_scan_limit
        found: list[tuple[float, str, int, Row]] = []
        read = 0
        for sid, lo, hi in spans if spans is not None else self._search_spans(tenant, user):
            if budget is not None and read >= budget:
                break
            if budget is not None:
                lo = max(lo, hi - (budget - read))
            for start in range(lo, hi, 256):
                rows = self._b_rows(tenant, sid, start, min(hi, start + 256))
                read += len(rows)
                found.extend((query.score(got), sid, row.seq, row)
                             for row, got in matching_rows(query, rows))
        return ranked_after(found, after, limit), read

    def _search_spans(self, tenant: str, user: str | None) -> Iterable[Span]:
        after: tuple[str, str] | None = None
        while True:
            page = self._b_list_sessions(tenant, after, 200, user, recent=True)
            yield from map(own_span, page)
            if len(page) < 200:
                return
            last = page[-1]
            after = (recent_key(last), last.id)

    def _b_search(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                  user: str | None, after: Cursor | None, limit: int
                  ) -> list[tuple[float, str, int, Row]] | None:
        """Optional, a backend's index: at most ``limit`` of the tenant's own rows
        matching ``query``, as ``(score, session_id, seq, row)``, in ``rank_key``
        order (score descending, then session id and seq ascending), strictly after
        ``after`` in that order. ``spans`` (``(session_id, lo, hi)``): only rows in
        them; ``user``: only rows of that user's sessions (the engine checks again).
        None: no index (turned off, or not built yet): the engine scans."""
        return None

    def _b_search_sessions(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                           limit: int) -> set[str] | None:
        """Optional, a backend's index: of the sessions of ``spans`` (``own_span`` of
        each; every session of the tenant when None), those with an own row matching
        ``query``; at most ``limit`` of them (any ``limit`` when more match). None: no
        index; the engine reads the rows of the sessions it is given
        (``sessions_matching``)."""
        return None

    def sessions_matching(self, tenant: str, query: Query, spans: Sequence[Span]
                          ) -> set[str]:
        """Of the sessions of ``spans`` (``(session_id, lo, hi)``: each session's own
        rows), those with an own row matching ``query``: through the index, else by
        reading those rows (the listing's search on a backend without an index: bounded
        by the page of sessions it is given)."""
        if not spans:
            return set()
        found = self._b_search_sessions(tenant, query, spans, len(spans))
        if found is not None:
            return found
        return {span[0] for span in spans if self.first_match(tenant, query, span) is not None}

    def first_match(self, tenant: str, query: Query, span: Span, batch: int = 256
                    ) -> Row | None:
        """The first row of ``span`` that ``query`` matches, read ``batch`` rows at a
        time (no index: the rows themselves)."""
        session_id, lo, hi = span
        for start in range(lo, hi, batch):
            rows = self._b_rows(tenant, session_id, start, min(hi, start + batch))
            hit = next(matching_rows(query, rows), None)
            if hit is not None:
                return hit[0]
        return None


_MISSING = object()


def rank_key(hit: tuple[float, str, int, Any]) -> tuple[float, str, int]:
    """The order of hits: score descending, then session id and seq ascending."""
    return (-hit[0], hit[1], hit[2])


def ranked_after(found: Iterable[tuple[float, str, int, Row]], after: Cursor | None,
                 limit: int) -> list[tuple[float, str, int, Row]]:
    """The first ``limit`` hits of ``found`` in ``rank_key`` order, strictly after
    ``after`` (a page's cursor) in that order."""
    mark = None if after is None else rank_key((*after, None))
    return sorted((f for f in found if mark is None or rank_key(f) > mark),
                  key=rank_key)[:limit]
