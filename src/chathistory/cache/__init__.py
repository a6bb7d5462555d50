"""Prompt caching: each provider's rules and a per-turn cache plan.

``plan_cache`` says where this turn's cache breakpoints go (Anthropic), which
``prompt_cache_key`` to send (OpenAI), what prefix is cached (OpenAI, Gemini) and
what the turn costs; ``cache_rules`` reads the rules from the data file
``rules.json``, each with its source and the day it was read; ``input_cost``
prices a provider's observed usage (``Message.usage``) by the same rules.
"""

from .observed import input_cost
from .plan import CachePlan, plan_cache, prompt_cache_key
from .rules import PROVIDERS, CacheRules, cache_rules

__all__ = ["PROVIDERS", "CachePlan", "CacheRules", "cache_rules", "input_cost", "plan_cache",
           "prompt_cache_key"]
