"""The streaming readers behind ``import``: any chunking gives the same records,
and a file cut anywhere yields exactly the whole records before the cut."""

from __future__ import annotations

import json
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory.importers._stream import JSONArrayReader, JSONLinesReader

# Strings full of what a naive scanner trips on: quotes, backslashes, brackets.
tricky_text = st.text(alphabet=st.sampled_from(list('ab"\\[]{},: \n\u00e9\U0001f600')),
                      max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky_text,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(tricky_text, children, max_size=3),
    max_leaves=8)
records = st.lists(st.dictionaries(tricky_text, json_values, max_size=3), max_size=6)


def chunked(data: bytes, sizes: list[int]) -> Iterator[bytes]:
    pos, i = 0, 0
    while pos < len(data):
        size = sizes[i % len(sizes)] if sizes else len(data)
        yield data[pos:pos + size]
        pos += size
        i += 1


@settings(max_examples=300, deadline=None)
@given(records, st.lists(st.integers(1, 9), min_size=1, max_size=5), st.booleans())
def test_array_reader_any_chunking(items: list[dict[str, object]], sizes: list[int],
                                   pretty: bool) -> None:
    text = json.dumps(items, indent=2 if pretty else None, ensure_ascii=False)
    data = (("\ufeff" if pretty else "") + text).encode()
    reader = JSONArrayReader(chunked(data, sizes))
    got = [json.loads(record.raw) for record in reader]
    assert got == items
    assert reader.truncated is None and reader.offset == len(data)


@settings(max_examples=300, deadline=None)
@given(records.filter(bool), st.data())
def test_array_reader_cut_anywhere(items: list[dict[str, object]], data: st.DataObject) -> None:
    whole = json.dumps(items, ensure_ascii=False).encode()
    cut = data.draw(st.integers(1, len(whole) - 1))
    sizes = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    reader = JSONArrayReader(chunked(whole[:cut], sizes))
    got = [json.loads(record.raw) for record in reader]
    # exactly the records that end before the cut
    ends = []
    pos = 1
    for item in items:
        pos += len(json.dumps(item, ensure_ascii=False).encode())
        ends.append(pos)
        pos += 2  # ", "
    assert got == [item for item, end in zip(items, ends, strict=True) if end <= cut]
    assert reader.truncated is not None and reader.truncated.index == len(got)
    assert reader.truncated.size == cut


@settings(max_examples=200, deadline=None)
@given(records, st.lists(st.integers(1, 9), min_size=1, max_size=5), st.booleans())
def test_lines_reader_any_chunking(items: list[dict[str, object]], sizes: list[int],
                                   final_newline: bool) -> None:
    text = "\n".join(json.dumps(i, ensure_ascii=False) for i in items)
    data = ("\ufeff" + text + ("\n" if final_newline else "")).encode()
    reader = JSONLinesReader(chunked(data, sizes))
    got = [json.loads(record.raw) for record in reader]
    assert got == items


def test_array_reader_positions_and_errors() -> None:
    data = b'\xef\xbb\xbf [ {"a": 1} ,\n{"b": "]"} ]  '
    reader = JSONArrayReader([data[:5], data[5:]])
    got = list(reader)
    assert [record.raw for record in got] == [b'{"a": 1}', b'{"b": "]"}']
    assert [record.offset for record in got] == [data.index(b"{"), data.index(b'{"b"')]
    missing_bracket = JSONArrayReader([b'[{"a": 1},'])
    assert len(list(missing_bracket)) == 1
    assert missing_bracket.truncated is not None
    assert "closing ']'" in missing_bracket.truncated.reason
