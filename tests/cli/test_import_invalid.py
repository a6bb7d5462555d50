"""Invalid records in ``import``: each is skipped with where it is and why
(``--skip-invalid``) and the records after it are imported, or stops the import
naming the record and field with nothing of it stored; a record larger than the
bound is refused without being read whole. For every outside format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clikit import Run
from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory import InvalidMessage, open_store
from chathistory.importers import import_file
from chathistory.importers._stream import JSONArrayReader, Record
from chathistory.stores import MemoryStore


def chatgpt_record(i: int, text: str = "hello") -> dict[str, Any]:
    def node(key: str, parent: str | None, children: list[str], role: str,
             said: str) -> dict[str, Any]:
        return {"id": key, "parent": parent, "children": children, "message": {
            "id": key, "author": {"role": role}, "recipient": "all", "create_time": 1700000000,
            "content": {"content_type": "text", "parts": [said]}, "metadata": {}}}
    return {"title": f"conversation {i}", "conversation_id": f"c{i}", "create_time": 1700000000,
            "current_node": "a", "mapping": {"u": node("u", None, ["a"], "user", f"{text} {i}"),
                                             "a": node("a", "u", [], "assistant", "hi")}}


def sharegpt_record(i: int, text: str = "hello") -> dict[str, Any]:
    return {"id": f"s{i}", "conversations": [{"from": "human", "value": f"{text} {i}"},
                                             {"from": "gpt", "value": "hi"}]}


def openai_record(i: int, text: str = "hello") -> dict[str, Any]:
    return {"id": f"o{i}", "messages": [{"role": "user", "content": f"{text} {i}"},
                                        {"role": "assistant", "content": "hi"}]}


FORMATS = {"chatgpt": chatgpt_record, "sharegpt": sharegpt_record, "openai": openai_record}


def write_file(path: Path, fmt: str, records: list[bytes]) -> Path:
    if fmt == "openai":
        path.write_bytes(b"\n".join(records) + b"\n")
    else:
        path.write_bytes(b"[" + b", ".join(records) + b"]")
    return path


def imported_texts(url: str) -> list[str]:
    store = open_store(url)
    try:
        return sorted(store.range(s.id)[0].text for s in store.list_sessions(limit=100).items)
    finally:
        store.close()


# How a record goes bad, for each format: the bytes of record 1 of 6.
def stray_brace(fmt: str) -> bytes:
    raw = json.dumps(FORMATS[fmt](1)).encode()
    return raw.replace(b'"hi"', b'"hi", {', 1)  # a '{' where a value or key is expected


def deep_record(fmt: str) -> bytes:
    raw = json.dumps(FORMATS[fmt](1)).encode()
    return raw[:-1] + b', "extra": ' + b"[" * 1000 + b"1" + b"]" * 1000 + b"}"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("spoil", [stray_brace, deep_record])
def test_a_bad_record_is_skipped_and_the_rest_imported(
        tmp_path: Path, cli: Run, store_url: str, other_store_url: str, fmt: str,
        spoil: Any) -> None:
    records = [json.dumps(FORMATS[fmt](i)).encode() for i in range(6)]
    records[1] = spoil(fmt)
    path = write_file(tmp_path / f"bad.{fmt}", fmt, records)

    result = cli("import", path, "--skip-invalid", "--store", store_url, "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["conversations"] == 6 and report["truncated"] is None
    assert len(report["invalid"]) == 1
    assert "record 1 (" in report["invalid"][0]  # with its place in the file
    assert ("line 2" if fmt == "openai" else "byte") in report["invalid"][0]
    assert imported_texts(store_url) == [f"hello {i}" for i in (0, 2, 3, 4, 5)]
    plain = cli("import", path, "--skip-invalid", "--store", store_url)
    assert "6 conversations read (1 invalid, skipped)" in plain.out

    strict = cli("import", path, "--store", other_store_url)
    assert strict.code == 2 and "record 1" in strict.err and "$[1]" in strict.err
    assert "Traceback" not in strict.err
    assert imported_texts(other_store_url) == ["hello 0"]  # nothing of record 1


@pytest.mark.parametrize(("where", "value"), [("conversation", 1e300), ("message", -1e20),
                                               ("conversation", -1e20), ("message", 1e300)])
def test_a_time_out_of_range_is_an_invalid_record(
        tmp_path: Path, cli: Run, store_url: str, other_store_url: str, where: str,
        value: float) -> None:
    records = [chatgpt_record(i) for i in range(4)]
    if where == "conversation":
        records[2]["create_time"] = value
        field = "$[2].create_time"
    else:
        records[2]["mapping"]["a"]["message"]["create_time"] = value
        field = '$[2].mapping["a"].message.create_time'
    path = tmp_path / "times.json"
    path.write_text(json.dumps(records))
    report = cli("import", path, "--skip-invalid", "--store", store_url, "--json").json()
    assert len(report["invalid"]) == 1 and field in report["invalid"][0]
    assert imported_texts(store_url) == ["hello 0", "hello 1", "hello 3"]
    strict = cli("import", path, "--store", other_store_url)
    assert strict.code == 2 and field in strict.err and "record 2" in strict.err
    assert imported_texts(other_store_url) == ["hello 0", "hello 1"]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_record_larger_than_the_bound_is_refused(tmp_path: Path, store_url: str,
                                                   fmt: str) -> None:
    records = [json.dumps(FORMATS[fmt](i, "x" * (5000 if i == 1 else 5))).encode()
               for i in range(4)]
    path = write_file(tmp_path / f"big.{fmt}", fmt, records)
    store = open_store(store_url)
    try:
        with pytest.raises(InvalidMessage, match=r"record 1 .*larger than 2,000 bytes") as info:
            import_file(store, path, max_record=2000)
        assert info.value.path == "$[1]"
        report = import_file(store, path, max_record=2000, skip_invalid=True)
        assert report.conversations == 4 and len(report.invalid) == 1
        assert "larger than 2,000 bytes" in report.invalid[0]
        assert sorted(store.range(s.id)[0].text for s in store.list_sessions().items) == [
            "xxxxx 0", "xxxxx 2", "xxxxx 3"]
    finally:
        store.close()


class CountingChunks:
    """Chunks of ``data``; counts the bytes handed out."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.handed = data, size, 0

    def __iter__(self) -> Any:
        for start in range(0, len(self.data), self.size):
            chunk = self.data[start:start + self.size]
            self.handed += len(chunk)
            yield chunk


def test_a_record_over_the_bound_is_not_read_whole() -> None:
    """A strict import stops at the bound: of a 50 MB record (a zip bomb's
    conversations.json), the reader reads not much more than ``max_record``."""
    huge = b'[{"mapping": {}, "title": "' + b"x" * 50_000_000 + b'"}]'
    chunks = CountingChunks(huge, 1 << 16)
    first = next(iter(JSONArrayReader(chunks, max_record=1 << 20)))
    assert first.error is not None and "larger than 1,048,576 bytes" in first.error
    assert chunks.handed <= (1 << 20) + 2 * (1 << 16)


def test_a_large_record_is_read_in_one_pass(tmp_path: Path) -> None:
    """Each byte of a record that runs over many chunks (one long string) is
    scanned once, also by an import, whose format detection reads the first
    record: the work counted in bytes the scanner looks at stays linear."""
    import chathistory.importers._stream as stream

    text = b"y" * 4_000_000
    data = b'[{"mapping": {}, "title": "' + text + b'", "n": [1, {"a": "]"}]}]'
    path = tmp_path / "one.json"
    path.write_bytes(data)
    scanned = 0
    real = stream._Brackets.end_in

    def counting(self: Any, chunk: bytes, pos: int) -> int | None:
        nonlocal scanned
        end = real(self, chunk, pos)
        scanned += (len(chunk) if end is None else end) - pos
        return end

    stream._Brackets.end_in = counting  # type: ignore[method-assign]
    try:
        records = list(JSONArrayReader(CountingChunks(data, 1 << 12)))
        assert len(records) == 1 and records[0].raw == data[1:-1]
        assert scanned <= len(data)
        scanned = 0
        report = import_file(MemoryStore(counter="approx"), path)
        assert report.format == "chatgpt" and report.conversations == 1
        assert scanned <= len(data)
    finally:
        stream._Brackets.end_in = real  # type: ignore[method-assign]


# Any record with a stray '{' or '[' anywhere: every other record is read back.
tricky_text = st.text(alphabet=st.sampled_from(list('ab"\\[]{},: \n\u00e9')), max_size=8)
values = st.recursive(st.none() | st.booleans() | st.integers() | tricky_text,
                      lambda children: st.lists(children, max_size=3)
                      | st.dictionaries(tricky_text, children, max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(values, min_size=2, max_size=6), st.data())
def test_a_stray_bracket_spoils_only_its_record(bodies: list[Any], data: st.DataObject) -> None:
    records = [json.dumps({"id": i, "body": body}).encode() for i, body in enumerate(bodies)]
    bad = data.draw(st.integers(0, len(records) - 1))
    at = data.draw(st.integers(1, len(records[bad]) - 1))
    records[bad] = records[bad][:at] + data.draw(st.sampled_from([b"{", b"["])) + \
        records[bad][at:]
    whole = b"[" + b",\n ".join(records) + b"]"
    size = data.draw(st.integers(1, 64))

    def is_record(raw: bytes) -> bool:
        value = json.loads(raw)
        return isinstance(value, dict) and "id" in value

    got: list[Record] = list(JSONArrayReader(
        (whole[i:i + size] for i in range(0, len(whole), size)), is_record=is_record))
    assert len(got) == len(records)
    for i, record in enumerate(got):
        if i != bad:
            assert record.error is None and json.loads(record.raw) == {"id": i,
                                                                        "body": bodies[i]}
