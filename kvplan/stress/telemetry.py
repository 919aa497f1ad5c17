"""Server telemetry: scrape an OpenAI-compatible server's Prometheus `/metrics` during a run.

Parsed with prometheus_client's own parser. Read under vLLM's names (V1, and the V0 names where
they differ), summed over label sets (several engines behind one server add up), except KV usage,
which is averaged over engines. A sample is a flat dict with `t_s` (seconds on the run's clock)
and whichever figures the server exports; absent ones are left out, never reported as 0.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kvplan.stress.bounded_http import MAX_METRICS_BYTES, BoundedResponse, bounded_request
from kvplan.stress.redact import redact

SCRAPE_INTERVAL_S = 0.5  # about twice a second, as the issue asks
SCRAPE_TIMEOUT_S = 2.0
MAX_LAST_ERROR_CHARS = 200  # of `last_error`; cut after masking

# sample key -> accepted sample names, newest first.
GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
    "num_requests_swapped": ("vllm:num_requests_swapped",),
    "kv_cache_bytes_in_use": ("kvplan:kv_cache_bytes_in_use",),
    "gpu_prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),  # V0 only (no query/hit counters)
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "num_preemptions_total": ("vllm:num_preemptions_total",),
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    # a KV connector's (CPU offloading, LMCache): tokens asked of it past the GPU hits, tokens it had
    "external_prefix_cache_queries_total": ("vllm:external_prefix_cache_queries_total",),
    "external_prefix_cache_hits_total": ("vllm:external_prefix_cache_hits_total",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
}
AVERAGED = frozenset({"kv_cache_usage_perc", "gpu_prefix_cache_hit_rate"})
CACHE_CONFIG_INFO = "vllm:cache_config_info"
_WANTED = {name: key for key, names in {**GAUGES, **COUNTERS}.items() for name in names}


# what a server may report before a figure sizes anything: 2^31 blocks of 2^20 tokens is past any
# GPU's memory (a block holds at least one token's K and V); beyond it the label is refused
MAX_REPORTED_BLOCKS = 2**31
MAX_REPORTED_BLOCK_TOKENS = 2**20


def label_int(text: str | None, max_value: int = MAX_REPORTED_BLOCKS) -> int | None:
    """A Prometheus label value as an int in [0, max_value] (None: absent, 'None', not a whole
    number, or out of that range: a hostile server's 1e308 never sizes a pool)."""
    try:
        value = float(text) if text not in (None, "", "None") else None
    except ValueError:
        return None
    if value is None or not 0 <= value <= max_value or value != int(value):  # NaN fails the range check
        return None
    return int(value)


def parse_metrics(text: str) -> tuple[dict[str, float], dict[str, str] | None]:
    """(figures by sample key, labels of `vllm:cache_config_info` or None). Raises ValueError on bad text."""
    found: dict[str, dict[str, list[float]]] = {}  # key -> sample name -> values (one per label set)
    cache_labels: dict[str, str] | None = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == CACHE_CONFIG_INFO and cache_labels is None:
                cache_labels = dict(s.labels)
            key = _WANTED.get(s.name)
            value = float(s.value)
            # a figure outside what it can physically be (NaN, inf, negative, a fraction above 1)
            # is the server's error, not a measurement: dropped before it sizes anything
            if key is not None and math.isfinite(value) and value >= 0 and (key not in AVERAGED or value <= 1):
                found.setdefault(key, {}).setdefault(s.name, []).append(value)
    figures: dict[str, float] = {}
    for key, by_name in found.items():
        names = GAUGES.get(key) or COUNTERS[key]
        values = next(by_name[n] for n in names if n in by_name)  # the newest name the server exports
        figures[key] = sum(values) / len(values) if key in AVERAGED else sum(values)
    return figures, cache_labels


def cache_config(labels: dict[str, str] | None) -> dict[str, Any]:
    """`num_gpu_blocks` and `block_size` as ints (None when absent), plus every raw label."""
    labels = labels or {}
    return {
        "num_gpu_blocks": label_int(labels.get("num_gpu_blocks"), MAX_REPORTED_BLOCKS),
        "block_size": label_int(labels.get("block_size"), MAX_REPORTED_BLOCK_TOKENS),
        "labels": dict(labels),
    }


def _refusal(resp: BoundedResponse) -> str:
    """A non-200 answer as `last_error` tells it (unmasked: the caller masks): status, redirect, body."""
    location = resp.headers.get("location", "") if resp.is_redirect else ""
    body = resp.text.strip()
    return (
        f"HTTP {resp.status_code}" + (f" redirected to {location}" if location else "") + (f": {body}" if body else "")
    )


class MetricsScraper:
    """Scrapes `metrics_url` every `interval_s` until stopped; keeps every sample in `samples`.

    A failed scrape (timeout, HTTP error, unparsable text) is counted, never raised: telemetry must
    not end a load run. `available` stays False when the server has no usable /metrics.
    `last_error` is the server's text (an error page, the line the parser refused): `secrets`
    (the API key) are masked in it, as is anything that looks like a credential.
    """

    def __init__(self, client: httpx.AsyncClient, metrics_url: str, clock_s: Callable[[], float], *,
                 interval_s: float = SCRAPE_INTERVAL_S, timeout_s: float = SCRAPE_TIMEOUT_S,
                 secrets: Iterable[str | None] = ()) -> None:
        self._client = client
        self._url = metrics_url
        self._clock_s = clock_s
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._secrets = tuple(s for s in secrets if s)
        self.samples: list[dict[str, float]] = []
        self.cache_labels: dict[str, str] | None = None
        self.num_errors = 0
        self.last_error: str | None = None
        self.available = False

    async def scrape_once(self) -> dict[str, float] | None:
        t_s = self._clock_s()
        try:
            resp = await bounded_request(self._client, "GET", self._url, max_bytes=MAX_METRICS_BYTES,
                                         total_s=self._timeout_s, timeout=self._timeout_s)
            if resp.status_code != 200:
                raise ValueError(_refusal(resp))
            figures, labels = parse_metrics(resp.text)
        except (httpx.HTTPError, ValueError) as exc:
            self.num_errors += 1
            text = " ".join(f"{type(exc).__name__}: {exc}".split())  # uncut: masked first, then cut
            self.last_error = redact(text, self._secrets, max_chars=MAX_LAST_ERROR_CHARS)
            return None
        self.available = True
        if labels is not None and self.cache_labels is None:
            self.cache_labels = labels
        sample = {"t_s": t_s, **figures}
        self.samples.append(sample)
        return sample

    async def run(self, stop: asyncio.Event) -> None:
        """Scrape now, then every interval (measured start to start), until `stop` is set; once more at the end."""
        while not stop.is_set():
            started_s = self._clock_s()
            await self.scrape_once()
            wait_s = max(self._interval_s - (self._clock_s() - started_s), 0.0)
            try:
                await asyncio.wait_for(stop.wait(), timeout=wait_s)
            except asyncio.TimeoutError:
                pass
        await self.scrape_once()
