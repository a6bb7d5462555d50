"""Summarization: replace the oldest messages by one summary message.

The summary goes right after the kept system and developer messages. Its
metadata lists the ids it replaces (``metadata["chathistory"]["summary_of"]``);
an earlier summary is folded into the next one (its text goes to the
summarizer, its ids into the new list), never stacked.

A summarizer is any ``messages -> str`` callable, sync or async. One that
raises, times out or returns no text raises ``SummarizationFailed`` and the
input is left as it was: an error text never becomes a summary.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import os
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import ChatHistoryError
from ..model import Message, TextPart
from .base import BaseReducer, Split
from .truncation import TruncationReducer, kept_roles

__all__ = [
    "SUMMARY_KEY",
    "OpenAICompatibleSummarizer",
    "SummarizationFailed",
    "SummarizationReducer",
    "is_summary",
    "summary_of",
]

SUMMARY_KEY = "chathistory"
"""Metadata key of the summary record: ``{"summary_of": [ids...]}``."""

Summarizer = Callable[[list[Message]], str | Awaitable[str]]


class SummarizationFailed(ChatHistoryError):
    """The summarizer raised, timed out or returned no text; nothing changed."""


def is_summary(message: Message) -> bool:
    """True for a message made by ``SummarizationReducer``."""
    record = message.metadata.get(SUMMARY_KEY)
    return isinstance(record, dict) and "summary_of" in record


def summary_of(message: Message) -> list[str]:
    """The ids a summary message replaces (empty for other messages)."""
    record = message.metadata.get(SUMMARY_KEY)
    return list(record.get("summary_of", [])) if isinstance(record, dict) else []


class SummarizationReducer(BaseReducer):
    """Above ``target_count + threshold_count`` messages, summarize the oldest so
    about ``target_count`` remain besides the summary (the cut is the one
    ``TruncationReducer`` makes: kept system and developer messages count within
    ``target_count``, as in Semantic Kernel's ``ChatHistorySummarizationReducer``).

    ``summary_role`` defaults to ``user``: every provider accepts a user message
    first after the system prompt (Anthropic requires it); the text starts with
    ``summary_prefix``. ``timeout`` (seconds) bounds the summarizer.
    """

    def __init__(
        self,
        summarizer: Summarizer,
        target_count: int,
        threshold_count: int = 0,
        *,
        keep_system: bool = True,
        summary_role: str = "user",
        summary_prefix: str = "Summary of the earlier conversation:\n",
        timeout: float | None = 60.0,
    ) -> None:
        self.summarizer = summarizer
        self.truncation = TruncationReducer(target_count, threshold_count, keep_system=keep_system)
        self.keep_roles = kept_roles(keep_system)
        self.summary_role = summary_role
        self.summary_prefix = summary_prefix
        self.timeout = timeout

    def _plan(self, messages: Sequence[Message]) -> tuple[Split, int, list[Message]] | None:
        # an earlier summary is part of what gets summarized again, wherever it is
        split = Split(messages, self.keep_roles, exclude=is_summary)
        start = self.truncation.cut_index(split)
        if start is None:
            return None
        earlier = [m for m in messages if is_summary(m)]
        kept = {id(m) for m in split.cut(start)}
        # everything the cut drops: the older messages, and orphan groups after the cut
        return split, start, earlier + [m for m in split.rest if id(m) not in kept]

    def _build(self, split: Split, start: int, removed: list[Message], text: object
               ) -> list[Message]:
        if not isinstance(text, str) or not text.strip():
            raise SummarizationFailed(f"the summarizer returned no text ({text!r})")
        replaced: list[str] = []
        for m in removed:
            replaced.extend(summary_of(m) if is_summary(m) else [m.id])
        summary = Message(
            role=self.summary_role,
            parts=[TextPart(text=self.summary_prefix + text.strip())],
            metadata={SUMMARY_KEY: {"summary_of": replaced}},
        ).validate()
        out = split.cut(start)
        at = 0
        while at < len(out) and out[at].role in self.keep_roles:
            at += 1
        out.insert(at, summary)
        return out

    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        plan = self._plan(messages)
        if plan is None:
            return None
        split, start, removed = plan
        text = _call_sync(self.summarizer, removed, self.timeout)
        return self._build(split, start, removed, text)

    async def areduce(self, messages: Sequence[Message]) -> list[Message] | None:
        plan = self._plan(messages)
        if plan is None:
            return None
        split, start, removed = plan
        try:
            if inspect.iscoroutinefunction(self.summarizer) or inspect.iscoroutinefunction(
                getattr(self.summarizer, "__call__", None)  # noqa: B004
            ):
                result = self.summarizer(removed)
                assert inspect.isawaitable(result)
                text: object = await asyncio.wait_for(result, self.timeout)
            else:
                text = await asyncio.wait_for(
                    asyncio.to_thread(self.summarizer, removed), self.timeout)
        except TimeoutError as exc:
            raise SummarizationFailed(f"the summarizer timed out after {self.timeout}s") from exc
        except Exception as exc:
            raise SummarizationFailed(f"the summarizer failed: {exc}") from exc
        return self._build(split, start, removed, text)


def _call_sync(summarizer: Summarizer, removed: list[Message], timeout: float | None) -> object:
    def run() -> object:
        result = summarizer(removed)
        if inspect.isawaitable(result):
            async def wait() -> object:
                return await result

            return asyncio.run(wait())
        return result

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(run).result(timeout=timeout)
    except concurrent.futures.TimeoutError as exc:
        raise SummarizationFailed(f"the summarizer timed out after {timeout}s") from exc
    except Exception as exc:
        raise SummarizationFailed(f"the summarizer failed: {exc}") from exc
    finally:
        pool.shutdown(wait=False)


DEFAULT_PROMPT = (
    "Summarize the conversation below for the assistant that continues it. Keep facts, "
    "decisions, names, numbers, open questions and the results of tool calls; drop "
    "pleasantries. Write in the conversation's language, as compact prose."
)


class OpenAICompatibleSummarizer:
    """A summarizer that calls any OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url``, ``model`` and ``api_key`` come from the arguments or from
    ``CHATHISTORY_SUMMARY_BASE_URL`` / ``OPENAI_BASE_URL``, ``CHATHISTORY_SUMMARY_MODEL``
    and ``OPENAI_API_KEY``. Uses only the standard library.
    """

    def __init__(self, *, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, prompt: str = DEFAULT_PROMPT,
                 timeout: float = 60.0, max_tokens: int = 1024) -> None:
        base = (base_url or os.environ.get("CHATHISTORY_SUMMARY_BASE_URL")
                or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1")
        self.url = base.rstrip("/") + "/chat/completions"
        self.model = model or os.environ.get("CHATHISTORY_SUMMARY_MODEL") or "gpt-4o-mini"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.prompt = prompt
        self.timeout = timeout
        self.max_tokens = max_tokens

    def request_body(self, messages: list[Message]) -> dict[str, Any]:
        from ..history import render_text

        names = {c.id: c.name for m in messages for c in m.tool_calls}
        transcript = "\n".join(line for m in messages for line in render_text(m, names))
        return {
            "model": self.model,
            "messages": [{"role": "system", "content": self.prompt},
                         {"role": "user", "content": transcript}],
            "max_tokens": self.max_tokens,
        }

    def __call__(self, messages: list[Message]) -> str:
        body = json.dumps(self.request_body(messages)).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            raise SummarizationFailed(f"summary endpoint answered {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            raise SummarizationFailed(f"summary endpoint failed: {exc}") from exc
        try:
            text = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise SummarizationFailed(f"unexpected summary response: {payload!r:.300}") from exc
        if not isinstance(text, str) or not text.strip():
            raise SummarizationFailed("the summary endpoint returned no text")
        return text
