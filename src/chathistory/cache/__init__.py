"""Prompt caching: each provider's rules and a per-turn cache plan.

``plan_cache`` says where this turn's cache breakpoints go (Anthropic), which
``prompt_cache_key`` to send (OpenAI), what prefix is cached (OpenAI, Gemini) and
what the turn costs; ``cache_rules`` reads the rules from the data file
``rules.json``, each with its source and the day it was read.
"""

from .plan import CachePlan, plan_cache, prompt_cache_key
from .rules import PROVIDERS, CacheRules, cache_rules

__all__ = ["PROVIDERS", "CachePlan", "CacheRules", "cache_rules", "plan_cache",
           "prompt_cache_key"]
