"""An attachment's fields that its bytes say are derived from them, one way for inline
bytes, ``from_bytes`` and uploads (issue 19); ``check_described`` refuses given fields
that disagree; decoding stays lenient for documents."""

from __future__ import annotations

import base64
from pathlib import Path

import msgspec
import pytest

from chathistory import Attachment, InvalidMessage, Message
from chathistory.assets import FileAssetStore
from chathistory.model.message import check_described

DATA = Path(__file__).parent / "data"
PHOTO = (DATA / "photo_400x300.png").read_bytes()


def _described(att: Attachment) -> tuple[object, ...]:
    return (att.name, att.size, att.modality, att.mime_type, att.sha256, att.width,
            att.height)


def test_decoded_bytes_are_described_as_from_bytes_describes_them() -> None:
    given = {"type": "image", "attachment": {"data": base64.b64encode(PHOTO).decode()}}
    message = Message.from_dict({"role": "user", "parts": [given]})
    att = message.attachments[0]
    assert _described(att) == _described(Attachment.from_bytes(PHOTO))
    assert (att.width, att.height, att.size, att.modality) == (400, 300, len(PHOTO), "image")


def test_an_upload_is_described_as_inline_bytes_are(tmp_path: Path) -> None:
    uploaded = FileAssetStore(tmp_path).put("t", PHOTO, name="p.png")
    inline = Attachment.from_bytes(PHOTO, name="p.png")
    assert _described(uploaded) == _described(inline)
    head = Attachment.of_file(PHOTO[:4096], size=len(PHOTO), sha256=inline.sha256, name="p.png")
    assert _described(head) == _described(inline) and head.data is None


def test_given_fields_are_kept_and_a_reference_derives_only_modality_and_name() -> None:
    kept = Attachment(data=PHOTO, name="x", mime_type="image/png", width=1, height=2)
    assert (kept.name, kept.width, kept.height) == ("x", 1, 2)
    reference = Attachment(sha256="ab" * 32, size=10, mime_type="image/jpeg")
    assert (reference.modality, reference.name, reference.width) == (
        "image", "abababababab.jpg", None)


@pytest.mark.parametrize(("field", "value", "path"), [
    ("modality", "document", "$.parts[0].attachment.modality"),
    ("width", 401, "$.parts[0].attachment.width"),
    ("height", 1, "$.parts[0].attachment.height"),
])
def test_check_described_names_the_field(field: str, value: object, path: str) -> None:
    att = msgspec.structs.replace(Attachment.from_bytes(PHOTO), **{field: value})
    message = Message.user("", att)
    message.validate()  # the library's own rules (size, sha256) hold
    with pytest.raises(InvalidMessage) as caught:
        check_described(message)
    assert caught.value.path == path
    check_described(Message.user("", Attachment.from_bytes(PHOTO)))  # agrees: no error


def test_a_reference_names_what_it_lacks() -> None:
    cases = [({"size": 3, "mime_type": "image/png"}, ".sha256"),
             ({"sha256": "ab" * 32, "mime_type": "image/png"}, ".size"),
             ({"sha256": "ab" * 32, "size": 3}, ".mime_type")]
    for attachment, field in cases:
        with pytest.raises(InvalidMessage) as caught:
            Message.from_dict({"role": "user", "parts": [{"type": "file",
                                                          "attachment": attachment}]})
        assert caught.value.path == "$.parts[0].attachment" + field


def test_the_library_still_ignores_fields_it_does_not_know() -> None:
    """docs/schema.md: readers ignore unknown fields (the HTTP API refuses them)."""
    message = Message.from_dict({"role": "user", "future": 1,
                                 "parts": [{"type": "text", "text": "hi", "later": 2}]})
    assert message.text == "hi"
