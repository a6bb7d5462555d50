"""Media fixtures for the format tests (helpers live in ``format_helpers``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chathistory import Attachment

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
