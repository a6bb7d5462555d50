"""Prometheus metrics: requests by method, route template and status, and a
latency histogram. Labels never carry a tenant, a session id or any other
value a client chose (unknown paths count as route ``unmatched``).

With several worker processes (``run(..., workers=N)``) the values live in
``PROMETHEUS_MULTIPROC_DIR`` and ``/metrics`` adds up every worker's.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate

__all__ = ["Metrics"]

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The metrics of one app (its own registry, so several apps can coexist)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("chathistory_http_requests", "HTTP requests answered",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("chathistory_http_request_duration_seconds",
                                 "Time to answer an HTTP request", ["method", "route"],
                                 buckets=_BUCKETS, registry=self.registry)
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        if method not in _METHODS:  # any token parses as a method: a label per made-up
            method = "other"        # one would grow the registry without bound
        key = (method, route, status)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = (
                self.requests.labels(method, route, str(status)),
                self.latency.labels(method, route))
        found[0].inc()
        found[1].observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every worker's metrics."""
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
            return _generate(registry)
        return _generate(self.registry)
