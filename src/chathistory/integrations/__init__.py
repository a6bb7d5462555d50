"""Adapters that put chathistory's stores behind other frameworks' memory interfaces.

One module per framework, each an optional extra; importing a module whose
framework is missing raises ``MissingDependency`` (an ``ImportError``) naming
the extra to install:

- ``chathistory.integrations.langchain`` (``chathistory[langchain]``):
  ``ChatHistoryMessageHistory``, ``to_langchain`` / ``from_langchain``.
- ``chathistory.integrations.openai_agents`` (``chathistory[openai-agents]``):
  ``ChatHistorySession``, the Agents SDK ``Session`` protocol over any store.
- ``chathistory.integrations.agent_framework`` (``chathistory[agent-framework]``):
  ``ChatHistoryAgentProvider``, a Microsoft Agent Framework ``HistoryProvider``.
- ``chathistory.integrations.pydantic_ai`` (``chathistory[pydantic-ai]``):
  ``to_pydantic_ai`` / ``from_pydantic_ai`` for ``message_history``.

This package itself imports no framework.
"""

from __future__ import annotations

__all__: list[str] = []
