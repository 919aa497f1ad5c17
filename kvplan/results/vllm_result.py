"""A run as `vllm bench serve --save-result --save-detailed` writes it: `result.vllm.json`.

Flat keys in vLLM's order, so tools that read vLLM's benchmark results read kvplan's: the run's
setup (`date`, `endpoint_type`, `backend`, `label`, `model_id`, `tokenizer_id`, `num_prompts`,
`request_rate`, `burstiness`, `max_concurrency`), its totals, the per-request arrays (`input_lens`,
`output_lens`, `ttfts`, `itls`, `latencies`, `start_times`, `queue_times`, `generated_texts`, `errors`),
`max_output_tokens_per_s`,
`max_concurrent_requests`, `rtfx` (0.0: text), then `mean_/median_/std_/pNN_` of `ttft`, `tpot`, `itl`, `e2el` in ms.
Keys taken from vLLM's `vllm/benchmarks/serve.py` (`benchmark()`'s result dict and `main()`'s
result_json). As vLLM: warmup requests are left out; a failed request has ttft 0.0, no itls,
output length 0 and its error text (successes: ""); seconds for the arrays, ms for the statistics.
Differences (docs/metrics.md): `start_times` are seconds on the run's clock (vLLM's are
perf_counter() values), `generated_texts` are empty (kvplan does not keep the text), and
`max_concurrency` is the closed loop's number of users (open loop: its cap, or None), as vLLM's flag.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import numpy as np

from kvplan.results.record import RequestRecord
from kvplan.results.result import RunResult

SETUP_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
              "burstiness", "max_concurrency")
TOTAL_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
              "request_goodput", "output_throughput", "total_token_throughput")
ARRAY_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)
PEAK_KEYS = ("max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
_STATISTIC = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")


def _setup(result: RunResult, num_prompts: int) -> dict[str, Any]:
    scenario, info = result.scenario, result.server_info
    arrival = scenario.get("arrival") or {}
    closed = arrival.get("type") == "concurrency"
    api = info.get("api")
    created = datetime.fromisoformat(result.created_at) if result.created_at else datetime.now()
    model = scenario.get("model")
    model_id = info.get("model") or (model.get("name") if isinstance(model, dict) else model)
    return {
        "date": created.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": ("openai-chat" if api == "chat" else "openai") if api else "kvplan-engine",
        "backend": ("openai-chat" if api == "chat" else "vllm") if api else "kvplan-engine",
        "label": scenario.get("name"),
        "model_id": model_id,
        "tokenizer_id": info.get("tokenizer") or model_id,
        "num_prompts": num_prompts,
        "request_rate": "inf" if closed else arrival.get("rate_per_s"),
        "burstiness": arrival.get("burstiness") or 1.0,
        "max_concurrency": arrival.get("concurrency") if closed else arrival.get("max_concurrency"),
    }


def _arrays(records: list[RequestRecord]) -> dict[str, list[Any]]:
    ok = [r.status == "ok" for r in records]
    return {
        "input_lens": [r.prompt_tokens for r in records],
        "output_lens": [r.output_tokens if good else 0 for r, good in zip(records, ok)],
        "ttfts": [float(r.ttft_s or 0.0) if good else 0.0 for r, good in zip(records, ok)],
        "itls": [[float(x) for x in r.itl_s] if good else [] for r, good in zip(records, ok)],
        "latencies": [float(r.e2e_s or 0.0) if good else 0.0 for r, good in zip(records, ok)],
        "start_times": [float(r.arrival_s) for r in records],
        "queue_times": [float(r.queue_s) for r in records],
        "generated_texts": ["" for _ in records],
        "errors": ["" if good else (r.error or r.status) for r, good in zip(records, ok)],
    }


def max_output_tokens_per_s(records: list[RequestRecord]) -> float:
    """The most tokens that reached the client within one whole second of the run (vLLM's peak)."""
    times = np.concatenate(
        [np.asarray(r.token_times_s, dtype=float) for r in records if r.status == "ok"] or [np.zeros(0)]
    )
    if times.size == 0:
        return 0.0
    return float(np.bincount(np.floor(times - times.min()).astype(np.int64)).max())


def vllm_bench_result(result: RunResult) -> dict[str, Any]:
    """`result` in the shape of `vllm bench serve --save-result --save-detailed`."""
    records = [r for r in result.records() if not r.is_warmup]
    m = result.metrics
    out = _setup(result, len(records))
    out.update({key: m.get(key) for key in TOTAL_KEYS})
    out.update(_arrays(records))
    out["max_output_tokens_per_s"] = max_output_tokens_per_s(records)
    out["max_concurrent_requests"] = m.get("max_concurrent_requests")
    out["rtfx"] = 0.0  # audio's real-time factor: 0 for text, as vLLM writes it
    out.update({key: value for key, value in m.items() if _STATISTIC.match(key)})
    return out
