"""Comparing what an example shows with what the server answered: the rules
docs/api.md's examples and the OpenAPI document's examples are checked by (see
``json_mismatches``)."""

from __future__ import annotations

from typing import Any

WILDCARD = "..."


def json_mismatches(shown: Any, real: Any, path: str = "$") -> list[str]:
    """Where ``real`` does not match ``shown``: every key shown is there with a matching
    value (keys not shown are not checked); ``"..."`` stands for any value, a string
    ending in ``...`` for any string starting with what comes before it; a list has
    the same length, unless its last item is ``"..."``: then the items shown are found
    in order among the real ones."""
    if shown == WILDCARD:
        return []
    if isinstance(shown, str) and shown.endswith(WILDCARD):
        if isinstance(real, str) and real.startswith(shown[:-len(WILDCARD)]):
            return []
        return [f"{path}: {real!r} does not start with {shown[:-len(WILDCARD)]!r}"]
    if isinstance(shown, dict):
        if not isinstance(real, dict):
            return [f"{path}: expected an object, got {real!r}"]
        out: list[str] = []
        for key, value in shown.items():
            if key not in real:
                out.append(f"{path}.{key}: missing (got keys {sorted(real)})")
            else:
                out += json_mismatches(value, real[key], f"{path}.{key}")
        return out
    if isinstance(shown, list):
        if not isinstance(real, list):
            return [f"{path}: expected a list, got {real!r}"]
        if shown and shown[-1] == WILDCARD:
            return in_order(shown[:-1], real, path)
        if len(shown) != len(real):
            return [f"{path}: {len(real)} items, the page shows {len(shown)}"]
        return [m for i, (s, r) in enumerate(zip(shown, real, strict=True))
                for m in json_mismatches(s, r, f"{path}[{i}]")]
    if shown != real or type(shown) is not type(real):
        return [f"{path}: {real!r}, the page shows {shown!r}"]
    return []


def in_order(shown: list[Any], real: list[Any], path: str) -> list[str]:
    position = 0
    for i, item in enumerate(shown):
        while position < len(real) and json_mismatches(item, real[position]):
            position += 1
        if position == len(real):
            return [f"{path}[{i}]: {item!r} is not among the real items in order"]
        position += 1
    return []
