"""ChatGPT data export: ``conversations.json`` (or the export's zip holding it).

Each conversation is a tree: ``mapping`` holds nodes ``{id, message, parent,
children}`` and ``current_node`` is the last message of the branch the user
was on. The path from the root to ``current_node`` becomes the session; every
other branch (an edited prompt, a regenerated answer) becomes a fork of it at
its branch point (``Store.fork``), or of another branch when it branches off a
branch. A branch's metadata says which alternative it is where it departs,
``branch``: ``"k of n"`` (ChatGPT's "< k/n >" at that message; the path the
user was on has the number left), so that branches of one title can be told
apart; the title stays the export's.

Nodes without a message, hidden ones (``metadata.is_visually_hidden_from_conversation``:
the empty system prompt, custom instructions) and empty ones are left out and
counted. Messages map as follows:

- ``text`` / ``multimodal_text`` parts: text, images (``image_asset_pointer`` ->
  an image part whose url is the export's pointer, with its size, and its media
  type when ``metadata.attachments`` records the upload), audio
  transcriptions as text; uploaded files in ``metadata.attachments`` become
  file parts named after the file (url ``file-service://<id>``). The export's
  files are not copied: the pointers say which file was there.
- An assistant message addressed to a tool (``recipient`` not ``all``) is a
  tool call: name = recipient, arguments = its JSON object, else ``{"code"}``
  for code or ``{"input"}`` for text.
- A ``tool`` message (author name ``python``, ``browser``, ``dalle.text2im``...)
  answering such a call is its tool result; one that answers no call (a
  second message of the same tool) stays a ``tool`` message with the tool's
  name and its text.
- ``thoughts`` become reasoning; ``code`` answers are fenced code blocks;
  ``execution_output``, ``tether_quote``, ``tether_browsing_display`` and
  ``system_error`` become text. ``reasoning_recap`` ("Thought for 8s") is left out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from ..errors import InvalidMessage
from ..model import (
    FilePart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    ResultPart,
    TextPart,
    ToolCall,
    ToolResult,
)
from ._write import Conversation, ImportReport, derived_id, invalid_record

__all__ = ["convert"]


class _Node(msgspec.Struct):
    id: str | None = None
    message: dict[str, Any] | None = None
    parent: str | None = None
    children: list[str] = []


class _Conversation(msgspec.Struct):
    mapping: dict[str, _Node]
    title: str | None = None
    create_time: float | None = None
    update_time: float | None = None
    current_node: str | None = None
    conversation_id: str | None = None
    id: str | None = None


_decoder = msgspec.json.Decoder(_Conversation)

_LEFT_OUT = frozenset({"reasoning_recap", "user_editable_context", "model_editable_context"})
"""Content shown only by ChatGPT's interface ("Thought for 8s"), or settings."""

_Pending = tuple[tuple[str, str], ...]
"""Tool calls waiting for their result along a path: (tool name, call id)."""


def convert(raw: bytes, index: int, report: ImportReport) -> Iterator[Conversation]:
    """The session and forks of one conversation."""
    try:
        conv = _decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise invalid_record(exc, index) from None
    conv_id = conv.conversation_id or conv.id or hashlib.sha256(raw).hexdigest()[:32]
    converter = _Converter(conv, conv_id, index, report)
    paths, branch_metadata = converter.paths()
    if not any(paths):
        report.skip("empty conversation")
        return
    metadata: dict[str, Any] = {"source": "chatgpt", "source_id": conv_id}
    if conv.title:
        metadata["title"] = conv.title
    if conv.create_time:
        metadata["created_at"] = _time(conv.create_time, f"$[{index}].create_time").isoformat()
    yield Conversation(session_id=derived_id("chatgpt", conv_id), paths=paths,
                       metadata=metadata, branch_metadata=branch_metadata)


def _time(value: float, path: str) -> datetime:
    """A Unix time as a datetime; a time no datetime holds (``1e300``) is refused."""
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        index = path[2:path.index("]")]
        raise InvalidMessage(f"record {index}: {value!r} is not a time a date can hold "
                             "(seconds since 1970, from year 1 to 9999)", path) from None


class _Converter:
    def __init__(self, conv: _Conversation, conv_id: str, index: int,
                 report: ImportReport) -> None:
        self.conv, self.conv_id, self.index, self.report = conv, conv_id, index, report

    def paths(self) -> tuple[list[list[Message]], list[dict[str, Any]]]:
        """The root-to-current_node path first, then every other root-to-leaf path
        (depth first, children in the export's order); and for each path the
        metadata of its session should it become a branch (``_branch_labels``)."""
        mapping = self.conv.mapping
        roots = [k for k, n in mapping.items() if n.parent is None or n.parent not in mapping]
        # Each node's visible path is a linked list (message, parent link) so that
        # branches share their prefix; computed iteratively (paths can be thousands deep).
        links: dict[str, tuple[Message, Any] | None] = {}
        leaves: list[str] = []
        stack: list[tuple[str, tuple[Message, Any] | None, _Pending]] = [
            (r, None, ()) for r in reversed(roots)]
        seen: set[str] = set()
        while stack:
            key, link, pending = stack.pop()
            if key in seen:  # a malformed mapping with a cycle or a shared child
                continue
            seen.add(key)
            node = mapping[key]
            message, pending = self._message(key, node, pending)
            if message is not None:
                link = (message, link)
            links[key] = link
            children = [c for c in node.children if c in mapping]
            if not children:
                leaves.append(key)
            stack.extend((c, link, pending) for c in reversed(children))
        current = self.conv.current_node
        if current not in links:
            current = leaves[-1] if leaves else None
        ordered = [current] if current is not None else []
        ordered.extend(leaf for leaf in leaves if leaf != current)
        return [_unlink(links[key]) for key in ordered], _branch_labels(mapping, ordered)

    def _message(self, key: str, node: _Node, pending: _Pending
                 ) -> tuple[Message | None, _Pending]:
        raw = node.message
        if raw is None:
            return None, pending
        path = f"$[{self.index}].mapping[{json.dumps(key)}].message"
        meta = _dict(raw.get("metadata"))
        if meta.get("is_visually_hidden_from_conversation"):
            self.report.skip("hidden node")
            return None, pending
        author = _dict(raw.get("author"))
        role = author.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidMessage(f"record {self.index}: a message without a role",
                                 path + ".author.role")
        name = author.get("name") or None
        content = _dict(raw.get("content"))
        kind = content.get("content_type")
        if kind in _LEFT_OUT:
            self.report.skip(str(kind).replace("_", " "))
            return None, pending
        recipient = raw.get("recipient") or "all"
        parts = self._parts(content, kind, meta, fence=role == "assistant" and recipient == "all")
        message_id = derived_id("chatgpt", self.conv_id, key)
        if role == "assistant" and recipient != "all" and parts:
            text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
            call = ToolCall(id="call_" + message_id.replace("-", "")[:24], name=recipient,
                            arguments=_arguments(text, kind))
            parts = [*(p for p in parts if isinstance(p, Reasoning)), call]
            pending = (*pending, (recipient, call.id))
        elif role == "tool" and parts:
            call_id, pending = _answer(pending, name)
            if call_id is not None:
                parts = [ToolResult(call_id=call_id, content=_result_content(parts), name=name)]
        elif role == "user":
            pending = ()
        if not parts:
            self.report.skip("empty node")
            return None, pending
        created = raw.get("create_time") or self.conv.create_time
        message = Message(id=message_id, role=role, name=name, parts=parts,
                          metadata=_message_metadata(meta))
        if isinstance(created, int | float) and not isinstance(created, bool):
            where = ".create_time" if raw.get("create_time") else ""
            message.created_at = _time(created, path + where if where else
                                       f"$[{self.index}].create_time")
        return message, pending

    def _parts(self, content: Mapping[str, Any], kind: Any, meta: Mapping[str, Any], *,
               fence: bool) -> list[Part]:
        """The parts of a message's content; ``fence`` puts code in a fenced block
        (an answer shown to the user, not code sent to a tool)."""
        parts: list[Part] = []
        match kind:
            case "text" | "multimodal_text":
                for item in content.get("parts") or []:
                    part = self._item(item)
                    if part is not None:
                        parts.append(part)
            case "code":
                text = _str(content.get("text"))
                language = content.get("language")
                if text and fence:
                    tag = "" if language in (None, "unknown") else str(language)
                    parts.append(TextPart(text=f"```{tag}\n{text}\n```"))
                elif text:
                    parts.append(TextPart(text=text))
            case "thoughts":
                texts = [_str(t.get("summary")) + "\n\n" + _str(t.get("content"))
                         for t in content.get("thoughts") or [] if isinstance(t, dict)]
                joined = "\n\n".join(t.strip() for t in texts if t.strip())
                if joined:
                    parts.append(Reasoning(text=joined))
            case "tether_quote":
                head = "\n".join(_str(content.get(k)) for k in ("title", "url")
                                 if content.get(k))
                body = _str(content.get("text"))
                text = f"{head}\n\n{body}".strip() if head else body
                if text:
                    parts.append(TextPart(text=text))
            case "tether_browsing_display":
                text = _str(content.get("result")) or _str(content.get("summary"))
                if text:
                    parts.append(TextPart(text=text))
            case "system_error":
                text = ": ".join(_str(content.get(k)) for k in ("name", "text")
                                 if content.get(k))
                if text:
                    parts.append(TextPart(text=text))
            case _:
                text = _str(content.get("text"))
                if not text and isinstance(content.get("parts"), list):
                    text = "\n".join(p for p in content["parts"] if isinstance(p, str))
                if text.strip():
                    parts.append(TextPart(text=text))
                elif kind != "execution_output":
                    self.report.skip(f"content type {kind}")
        parts = _merge_text(parts)
        records = {str(a["id"]): a for a in meta.get("attachments") or []
                   if isinstance(a, dict) and a.get("id")}
        pointers: set[str] = set()
        for i, part in enumerate(parts):
            if isinstance(part, ImagePart) and part.url:
                file_id = part.url.rsplit("/", 1)[-1]
                pointers.add(file_id)
                if file_id in records:
                    parts[i] = _described(part, records[file_id])
        for file_id, attachment in records.items():
            if file_id in pointers:
                continue  # the image is in the message already
            parts.append(FilePart(url=f"file-service://{file_id}",
                                  name=str(attachment.get("name") or file_id),
                                  mime_type=_mime(attachment)))
        return parts

    def _item(self, item: Any) -> Part | None:
        if isinstance(item, str):
            return TextPart(text=item) if item.strip() else None
        if not isinstance(item, dict):
            self.report.skip("unknown part")
            return None
        kind = item.get("content_type")
        if kind == "image_asset_pointer" and item.get("asset_pointer"):
            return ImagePart(url=str(item["asset_pointer"]), width=_int(item.get("width")),
                             height=_int(item.get("height")))
        if kind == "audio_transcription":
            text = _str(item.get("text"))
            return TextPart(text=text) if text.strip() else None
        text = _str(item.get("text"))
        if text.strip():
            return TextPart(text=text)
        self.report.skip(f"part type {kind}")
        return None


def _mime(attachment: Mapping[str, Any]) -> str | None:
    value = attachment.get("mimeType") or attachment.get("mime_type")
    return value if isinstance(value, str) and value else None


def _described(image: ImagePart, attachment: Mapping[str, Any]) -> ImagePart:
    """An image pointer with what the message's record of the upload says of it:
    its media type, and its size when the pointer gave none. (An image part has
    no name: the record's file name is not kept.)"""
    return msgspec.structs.replace(
        image, mime_type=image.mime_type or _mime(attachment),
        width=image.width or _int(attachment.get("width")),
        height=image.height or _int(attachment.get("height")))


def _branch_labels(mapping: Mapping[str, _Node], leaves: list[str]) -> list[dict[str, Any]]:
    """For each leaf's path, in the order the paths are stored: ``{"branch": "k of
    n"}`` when it leaves the paths stored before it at a node with n children by
    the k-th (ChatGPT's "< k/n >" there), else ``{}`` (the first path).

    The paths before it hold every node above that node, so the point is found
    by walking up from the leaf to the first node already on a stored path."""
    placed: set[str] = set()
    labels: list[dict[str, Any]] = []
    for leaf in leaves:
        label: dict[str, Any] = {}
        below: str | None = None
        key: str | None = leaf
        while key is not None and key in mapping and key not in placed:
            placed.add(key)
            below, key = key, mapping[key].parent
        if labels and below is not None and key is not None and key in mapping:
            children = [c for c in mapping[key].children if c in mapping]
            if below in children and len(children) > 1:
                label = {"branch": f"{children.index(below) + 1} of {len(children)}"}
        labels.append(label)
    return labels


def _unlink(link: tuple[Message, Any] | None) -> list[Message]:
    out: list[Message] = []
    while link is not None:
        out.append(link[0])
        link = link[1]
    out.reverse()
    return out


def _answer(pending: _Pending, name: str | None) -> tuple[str | None, _Pending]:
    """The call a tool message answers: the newest pending call of that tool, else
    the only pending call (tools sometimes answer under another name)."""
    for i in range(len(pending) - 1, -1, -1):
        if pending[i][0] == name:
            return pending[i][1], pending[:i] + pending[i + 1:]
    if len(pending) == 1:
        return pending[0][1], ()
    return None, pending


def _arguments(text: str, kind: Any) -> dict[str, Any]:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(value, dict):
                return value
    return {"code": text} if kind == "code" else {"input": text}


def _result_content(parts: list[Part]) -> str | list[ResultPart]:
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return [p for p in parts if isinstance(p, TextPart | ImagePart | FilePart)]


def _merge_text(parts: list[Part]) -> list[Part]:
    out: list[Part] = []
    for part in parts:
        if out and type(part) is TextPart and type(out[-1]) is TextPart:
            out[-1] = TextPart(text=out[-1].text + "\n" + part.text)
        else:
            out.append(part)
    return out


def _message_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    model = meta.get("model_slug")
    return {"model": model} if isinstance(model, str) and model else {}


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
