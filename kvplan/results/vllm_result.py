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
from dataclasses import dataclass, field
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
        "request_rate": "inf" if closed or arrival.get("type") == "ramp" else arrival.get("rate_per_s"),
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


@dataclass(frozen=True)
class VllmResultSettings:
    """What `vllm bench serve`'s result flags change in the file: --label, --metadata (top-level
    keys), --percentile-metrics and --metric-percentiles (which pNN_ statistics), --goodput (SLOs
    in ms behind request_goodput), --save-detailed (the per-request arrays). None of the statistics
    flags given: kvplan's own set (every metric, its standard percentiles)."""

    label: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    percentile_metrics: tuple[str, ...] | None = None  # None: kvplan's set
    metric_percentiles: tuple[float, ...] = (99.0,)
    goodput_ms: dict[str, float] = field(default_factory=dict)  # ttft / tpot / e2el -> ms
    detailed: bool = True


def _tpot_ms(r: RequestRecord) -> float:
    """vLLM's: (latency - ttft) / (output_len - 1), the last token to the answer's end included."""
    return 1e3 * (float(r.e2e_s or 0.0) - float(r.ttft_s or 0.0)) / (r.output_tokens - 1)


def _samples_ms(records: list[RequestRecord]) -> dict[str, list[float]]:
    """vLLM's samples per metric (calculate_metrics): successful requests only; tpot of requests
    with more than one output token; itl flattened."""
    ok = [r for r in records if r.status == "ok"]
    return {
        "ttft": [1e3 * float(r.ttft_s or 0.0) for r in ok],
        "tpot": [_tpot_ms(r) for r in ok if r.output_tokens > 1],
        "itl": [1e3 * float(x) for r in ok for x in r.itl_s],
        "e2el": [1e3 * float(r.e2e_s or 0.0) for r in ok],
    }


def _statistics(samples: dict[str, list[float]], metrics: tuple[str, ...],
                percentiles: tuple[float, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in metrics:
        values = np.asarray(samples[metric] or [0.0], dtype=float)  # vLLM: `or 0` on an empty list
        out[f"mean_{metric}_ms"] = float(values.mean())
        out[f"median_{metric}_ms"] = float(np.median(values))
        out[f"std_{metric}_ms"] = float(values.std())
        for p in percentiles:
            out[f"p{p:g}_{metric}_ms"] = float(np.percentile(values, p))
    return out


def _goodput(records: list[RequestRecord], slo_ms: dict[str, float], duration_s: float | None) -> float | None:
    """Requests meeting every SLO per second (vLLM: ttft, tpot and e2el against --goodput, in ms)."""
    if not duration_s:
        return None
    good = 0
    for r in records:
        if r.status != "ok":
            continue
        got = {"ttft": 1e3 * float(r.ttft_s or 0.0), "e2el": 1e3 * float(r.e2e_s or 0.0),
               "tpot": _tpot_ms(r) if r.output_tokens > 1 else 0.0}
        good += all(got[k] <= v for k, v in slo_ms.items())
    return good / duration_s


def vllm_bench_result(result: RunResult, settings: VllmResultSettings | None = None) -> dict[str, Any]:
    """`result` in the shape of `vllm bench serve --save-result --save-detailed`."""
    settings = settings or VllmResultSettings()
    records = [r for r in result.records() if not r.is_warmup]
    m = result.metrics
    out = _setup(result, len(records))
    if settings.label is not None:
        out["label"] = settings.label
    out.update({key: m.get(key) for key in TOTAL_KEYS})
    if settings.goodput_ms:
        out["request_goodput"] = _goodput(records, settings.goodput_ms, m.get("duration"))
    if settings.detailed:
        out.update(_arrays(records))
    out["max_output_tokens_per_s"] = max_output_tokens_per_s(records)
    out["max_concurrent_requests"] = m.get("max_concurrent_requests")
    out["rtfx"] = 0.0  # audio's real-time factor: 0 for text, as vLLM writes it
    if settings.percentile_metrics is None:
        out.update({key: value for key, value in m.items() if _STATISTIC.match(key)})
    else:
        out.update(_statistics(_samples_ms(records), settings.percentile_metrics, settings.metric_percentiles))
    out.update(settings.metadata)  # vLLM: each --metadata KEY=VALUE a top-level key
    return out
