"""The ChatGPT importer's branch labels (which alternative a branch is where it
departs, ChatGPT's "< k/n >") and its image parts (media type and size from the
message's record of the upload; labelled as images the export did not include)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clikit import FIXTURES

from chathistory import History
from chathistory.importers import import_file
from chathistory.model import ImagePart
from chathistory.stores import MemoryStore
from chathistory.stores.model import Session

CHATGPT = FIXTURES / "chatgpt_conversations.json"


def node(key: str, parent: str | None, children: list[str], role: str | None = None,
         text: str = "", **message: Any) -> dict[str, Any]:
    """A mapping entry; with a role, a text message."""
    entry: dict[str, Any] = {"id": key, "parent": parent, "children": children}
    if role is not None:
        entry["message"] = {"id": key, "author": {"role": role}, "recipient": "all",
                            "create_time": 1700000000.0,
                            "content": {"content_type": "text", "parts": [text]},
                            "metadata": {}, **message}
    return entry


def imported(tmp_path: Path, conversations: list[dict[str, Any]]) -> MemoryStore:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(conversations))
    store = MemoryStore(counter="approx")
    import_file(store, path)
    return store


def by_first_own_text(store: MemoryStore) -> dict[str, Session]:
    """Each session of the store by the text of its last message."""
    return {store.range(s.id)[-1].text: s for s in store.list_sessions(limit=100).items}


def test_fixture_branches_are_numbered_where_they_depart() -> None:
    store = MemoryStore(counter="approx")
    import_file(store, CHATGPT)
    sessions = by_first_own_text(store)
    main = sessions["Done: cos(x) is plotted."]
    regenerated = sessions["Regenerated: the sine curve is ready."]
    edited = sessions["tan(x) has asymptotes at pi/2 + k*pi."]
    assert "branch" not in main.metadata
    # the answer after the tool result was regenerated: 2nd of the tool node's 2 children
    assert regenerated.metadata["branch"] == "2 of 2" and regenerated.fork_seq == 3
    # the first prompt was edited: 2nd of 2 (a session of its own, nothing visible shared)
    assert edited.metadata["branch"] == "2 of 2" and edited.parent_id is None
    # the title stays the export's on every branch
    assert {s.metadata["title"] for s in (main, regenerated, edited)} == {"Plotting sine"}


def test_numbers_follow_the_export_not_the_order_of_storing(tmp_path: Path) -> None:
    """The user was on the 3rd of 3 answers, so the main path is that one; the
    other two are numbered 1 and 2 as ChatGPT shows them. A branch off a branch
    is numbered where it leaves its own parent."""
    mapping = {
        "root": node("root", None, ["u1"]),
        "u1": node("u1", "root", ["a1", "a2", "a3"], "user", "Name a colour"),
        "a1": node("a1", "u1", ["u2"], "assistant", "Red"),
        "u2": node("u2", "a1", ["a4", "a5"], "user", "Another?"),
        "a4": node("a4", "u2", [], "assistant", "Blue"),
        "a5": node("a5", "u2", [], "assistant", "Green"),
        "a2": node("a2", "u1", [], "assistant", "Teal"),
        "a3": node("a3", "u1", [], "assistant", "Mauve"),
    }
    store = imported(tmp_path, [{"title": "Colours", "mapping": mapping, "current_node": "a3",
                                 "conversation_id": "colours"}])
    sessions = by_first_own_text(store)
    assert "branch" not in sessions["Mauve"].metadata
    assert sessions["Blue"].metadata["branch"] == "1 of 3"
    assert sessions["Teal"].metadata["branch"] == "2 of 3"
    green = sessions["Green"]
    assert green.metadata["branch"] == "2 of 2"
    assert green.parent_id == sessions["Blue"].id and green.fork_seq == 3
    for name in ("Blue", "Teal"):
        assert sessions[name].parent_id == sessions["Mauve"].id
        assert sessions[name].fork_seq == 1


def test_uploaded_image_takes_its_media_type_and_size_from_the_upload_record(
        tmp_path: Path) -> None:
    pointer = {"content_type": "image_asset_pointer", "asset_pointer": "sediment://file_77",
               "size_bytes": 1234}
    upload = {"id": "file_77", "name": "IMG_0001.jpeg", "mime_type": "image/jpeg",
              "width": 640, "height": 480}
    mapping = {
        "root": node("root", None, ["u1"]),
        "u1": node("u1", "root", ["a1"], "user",
                   content={"content_type": "multimodal_text", "parts": [pointer, "What is it?"]},
                   metadata={"attachments": [upload]}),
        "a1": node("a1", "u1", [], "assistant", "A cat."),
    }
    store = imported(tmp_path, [{"title": "Photo", "mapping": mapping, "current_node": "a1",
                                 "conversation_id": "photo"}])
    (session,) = store.list_sessions(limit=10).items
    first = store.range(session.id)[0]
    image = first.parts[0]
    assert isinstance(image, ImagePart)
    assert image.url == "sediment://file_77"
    assert image.mime_type == "image/jpeg" and image.dimensions == (640, 480)
    assert len(first.parts) == 2  # the upload record made no second (file) part
    # the text-only copy calls it an image the export did not include
    assert History([first]).recent_text(1).splitlines() == [
        "User: What is it?", "Image (not included)"]


def test_text_only_copy_labels_images_without_names() -> None:
    store = MemoryStore(counter="approx")
    import_file(store, CHATGPT)
    sessions = by_first_own_text(store)
    lines = History(store.range(sessions["Done: cos(x) is plotted."].id)).recent_text(6)
    assert "File: data.csv" in lines.splitlines()  # an uploaded file keeps its name
    assert "Image (not included)" in lines.splitlines()
    assert "file-service://" not in lines
