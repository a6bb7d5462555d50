"""Media and store fixtures for the format tests (helpers live in ``format_helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chathistory import Attachment, Store, open_store

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture
def png() -> Attachment:
    return Attachment.from_bytes((DATA / "red_4x3.png").read_bytes(), name="red.png")


@pytest.fixture
def wav() -> Attachment:
    return Attachment.from_bytes((DATA / "silence.wav").read_bytes(), name="silence.wav")


@pytest.fixture
def pdf() -> Attachment:
    return Attachment.from_bytes((DATA / "report.pdf").read_bytes(), name="report.pdf")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A real store, opened by URL as users open one: what a format decodes must come
    back from storage unchanged."""
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/chat.db"
    opened = open_store(url)
    yield opened
    opened.close()
