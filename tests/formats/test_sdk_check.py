"""The SDK validation the format tests rely on can fail: unknown keys, nested
items behind lazy ``Iterable`` validators, and wrong literals are all caught."""

from __future__ import annotations

import pytest
from format_helpers import check_anthropic, check_gemini, check_openai_chat

BAD_CHAT = [
    [{"role": "user", "content": "hi", "bogus": 1}],
    [{"role": "user", "content": [{"type": "text", "text": "hi", "bogus": 1}]}],
    [{"role": "user", "content": [{"type": "image_url",
                                   "image_url": {"url": "x", "detail": "max"}}]}],
    [{"role": "tool", "content": "x"}],
]


@pytest.mark.parametrize("payload", BAD_CHAT)
def test_openai_checker_rejects(payload: list[dict[str, object]]) -> None:
    with pytest.raises((AssertionError, ValueError)):
        check_openai_chat(payload)


def test_anthropic_checker_rejects_unmerged_turns() -> None:
    with pytest.raises(AssertionError):
        check_anthropic({"messages": [{"role": "user", "content": "a"},
                                      {"role": "user", "content": "b"}]})


def test_gemini_checker_rejects_unknown_fields_and_bad_base64() -> None:
    with pytest.raises(ValueError):
        check_gemini({"contents": [{"role": "user", "parts": [{"txt": "a"}]}]})
    with pytest.raises(ValueError):
        check_gemini({"contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/png", "data": "not base64!"}}]}]})
