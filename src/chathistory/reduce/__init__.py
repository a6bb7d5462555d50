"""Reducers: functions from a list of messages to a shorter one.

``from chathistory.reduce import TruncationReducer, TokenBudgetReducer, ...``
"""

from .base import KEPT_ROLES, AsyncReducer, BaseReducer, Pipeline, Reducer, as_reducer
from .summarize import (
    OpenAICompatibleSummarizer,
    SummarizationFailed,
    SummarizationReducer,
    is_summary,
    summary_of,
)
from .truncation import MessageCountReducer, TokenBudgetReducer, TruncationReducer

__all__ = [
    "KEPT_ROLES",
    "AsyncReducer",
    "BaseReducer",
    "MessageCountReducer",
    "OpenAICompatibleSummarizer",
    "Pipeline",
    "Reducer",
    "SummarizationFailed",
    "SummarizationReducer",
    "TokenBudgetReducer",
    "TruncationReducer",
    "as_reducer",
    "is_summary",
    "summary_of",
]
