from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def png_bytes() -> bytes:
    return (DATA / "red_4x3.png").read_bytes()


@pytest.fixture
def wav_bytes() -> bytes:
    return (DATA / "silence.wav").read_bytes()


@pytest.fixture
def pdf_bytes() -> bytes:
    return (DATA / "report.pdf").read_bytes()
