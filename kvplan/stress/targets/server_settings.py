"""What a `--target` server is actually set up with, read before the run, so the prediction is made
for that server and not for the scenario's engine section.

Read: `/v1/models` (`max_model_len` of the served model, as vLLM lists it) and `/metrics`
(`vllm:cache_config_info`: `num_gpu_blocks`, `block_size`, `cache_dtype`, `enable_prefix_caching`,
`kv_cache_memory_bytes`, `gpu_memory_utilization`). Each read is bounded in bytes and seconds; a
server that answers neither leaves the scenario as written, and says so.

`adopt` plans with the server's settings and tells two causes apart in its notes:
- "server set up differently": a setting the scenario names (block size, KV dtype, max_model_len,
  prefix caching, KV bytes) that the server does not use; the prediction takes the server's.
- "planner": the same settings, yet kvplan's pool for them is not the server's: a kvplan error.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from kvplan.errors import KvplanError
from kvplan.stress.bounded_http import bounded_request
from kvplan.stress.scenario import Scenario
from kvplan.stress.telemetry import CACHE_CONFIG_INFO, label_int, parse_metrics

MAX_BYTES = 4 * 2**20
TIMEOUT_S = 5.0
KV_DTYPES = {"auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2", "float16": "float16",
             "half": "float16", "bfloat16": "bfloat16", "float32": "float32", "float": "float32"}


@dataclass(frozen=True)
class ServerSettings:
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    cache_dtype: str | None = None  # vLLM's --kv-cache-dtype as the server reports it
    enable_prefix_caching: bool | None = None
    kv_cache_memory_bytes: int | None = None
    max_model_len: int | None = None

    @property
    def known(self) -> bool:
        return self.num_gpu_blocks is not None or self.max_model_len is not None


def _int(text: Any) -> int | None:
    """A positive count the server told (None: absent or not one)."""
    value = label_int(str(text)) if text is not None else None
    return value if value is not None and value > 0 else None


def _bool(text: Any) -> bool | None:
    return {"true": True, "false": False}.get(str(text).strip().lower())


async def _read(url: str, headers: dict[str, str], served_model_name: str | None) -> ServerSettings:
    base = url.rstrip("/")
    async with httpx.AsyncClient(headers=headers, timeout=TIMEOUT_S, follow_redirects=False) as http:
        max_len = labels = None
        try:
            models = await bounded_request(http, "GET", f"{base}/v1/models", max_bytes=MAX_BYTES, total_s=TIMEOUT_S)
            data = models.json().get("data", []) if models.status_code == 200 else []
            entry = next((m for m in data if served_model_name in (None, m.get("id"))), None)
            max_len = _int(entry.get("max_model_len")) if isinstance(entry, dict) else None
        except (httpx.HTTPError, ValueError, AttributeError, TypeError, RecursionError):
            pass
        try:
            metrics = await bounded_request(http, "GET", f"{base}/metrics", max_bytes=MAX_BYTES, total_s=TIMEOUT_S)
            if metrics.status_code == 200:
                _, labels = parse_metrics(metrics.text)
        except (httpx.HTTPError, ValueError):
            pass
    labels = labels or {}
    return ServerSettings(
        num_gpu_blocks=_int(labels.get("num_gpu_blocks")),
        block_size=_int(labels.get("block_size")),
        cache_dtype=labels.get("cache_dtype"),
        enable_prefix_caching=_bool(labels.get("enable_prefix_caching")),
        kv_cache_memory_bytes=_int(labels.get("kv_cache_memory_bytes")),
        max_model_len=max_len,
    )


def read_server_settings(url: str, headers: dict[str, str], served_model_name: str | None = None) -> ServerSettings:
    """The server's settings (empty when it tells none); never raises for what the server answers.
    A URL that cannot be asked at all is left to the run's own probe, whose error names it."""
    try:
        return asyncio.run(_read(url, headers, served_model_name))
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, OSError):
        return ServerSettings()


def adopt(scenario: Scenario, server: ServerSettings) -> tuple[dict[str, Any], list[str]]:
    """(the scenario's mapping with the server's engine settings, notes naming each difference and its cause)."""
    if not server.known:
        return scenario.to_dict(), [f"the server reports neither its pool ({CACHE_CONFIG_INFO}) nor max_model_len: "
                                    "predicted with the scenario's engine settings"]
    data = scenario.to_dict()
    engine = dict(data.get("engine") or {})
    mine = scenario.engine
    notes, differs = [], []
    dtype = KV_DTYPES.get((server.cache_dtype or "").lower())
    changes = {"block_size": (mine.block_size, server.block_size),
               "kv_cache_dtype": (mine.kv_cache_dtype, dtype if dtype not in (None, "auto") else None),
               "enable_prefix_caching": (mine.enable_prefix_caching, server.enable_prefix_caching),
               "max_model_len": (scenario.max_model_len, server.max_model_len)}
    for key, (ours, theirs) in changes.items():
        if theirs is not None and theirs != ours:
            differs.append(f"{key} {theirs} (scenario: {ours})")
            engine[key] = theirs
    if server.max_model_len is not None and server.max_model_len > scenario.model_spec().max_position_embeddings:
        raise KvplanError(f"the server's max_model_len {server.max_model_len:,} exceeds {scenario.model_spec().name}'s "
                          f"{scenario.model_spec().max_position_embeddings:,}: is --model the server's model?")
    planned = scenario.num_gpu_blocks()
    if server.num_gpu_blocks is not None:
        same_budget = (
            server.kv_cache_memory_bytes is not None and server.kv_cache_memory_bytes == mine.kv_cache_memory_bytes
        )
        if planned is not None and planned != server.num_gpu_blocks and same_budget and not differs:
            notes.append(
                f"planner: the scenario's settings give {planned:,} KV blocks; the server, set up the same, has "
                f"{server.num_gpu_blocks:,}: kvplan's pool is wrong for this server"
            )
        elif planned is None:
            notes.append(
                f"the server's pool: {server.num_gpu_blocks:,} KV blocks (the scenario fixes none): predicted with it"
            )
        elif planned != server.num_gpu_blocks:
            differs.append(f"num_gpu_blocks {server.num_gpu_blocks:,} (scenario: {planned:,})")
        engine["num_gpu_blocks_override"] = server.num_gpu_blocks
        engine.pop("kv_cache_memory_bytes", None)
    if differs:
        notes.append("server set up differently: " + "; ".join(differs) + ": predicted with the server's settings")
    data["engine"] = engine
    return data, notes
