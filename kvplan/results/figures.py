"""The one list of a run's figures: name (vLLM's key where vLLM has one), unit, whether the
prediction carries it, and how the gate treats it by default.

Metrics, prediction, the console table, the HTML report and the gate all read this list, so a
figure added here shows up everywhere and a name nothing produces cannot be gated on.
Latency statistics (`mean|median|std|pNN` x `ttft|tpot|itl|e2el`) follow vLLM's naming and are
generated from `LATENCIES` and `PERCENTILES`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

RENAMED_FIGURES = {"max_concurrency": "peak_running_requests"}  # old name -> new (vLLM's max_concurrency means a cap)

Group = Literal["memory", "latency", "throughput", "requests", "slo", "machine", "normalized"]

PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)
LATENCIES: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")  # vLLM's metric attribute names
SLO_TO_METRIC = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}  # scenario slo key -> latency
LATENCY_TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
_LATENCY_RE = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")


@dataclass(frozen=True)
class Figure:
    name: str
    # bytes, blocks, tokens, count, s, ms, tok/s, req/s, ratio, bool, x (a speed multiple), cores,
    # threads, ref (multiples of the reference kernel's time), tok/ref (tokens per reference time)
    unit: str
    group: Group
    predicted: bool = False  # the prediction carries it: shown predicted vs measured
    default_gate: str | None = (
        None  # "exact" or a tolerance such as "+50%": the gate's checks when a scenario names none
    )
    in_allocator_table: bool = False  # a row of the paged-vs-contiguous comparison
    prediction_key: str | None = None  # the prediction's name for it, when it differs


_MEMORY = (
    Figure("num_gpu_blocks", "blocks", "memory", True, "exact", True),
    Figure("kv_pool_bytes", "bytes", "memory", True, "exact"),
    Figure("bytes_per_block", "bytes", "memory", True, "exact"),
    Figure("peak_kv_bytes", "bytes", "memory", True, "+5%", True),
    Figure("peak_kv_blocks", "blocks", "memory", True),
    Figure("peak_running_requests", "count", "memory", True, None, True),
    Figure("num_preemptions", "count", "memory", True, None, True),
    Figure("preemption_onset_step", "count", "memory", True),
    Figure("preemption_onset_s", "s", "memory", True, None, True),
    Figure("prefix_hit_tokens", "tokens", "memory", True),
    Figure("prefix_cache_evicted_blocks", "blocks", "memory", True),
    # a KV connector's hits (vLLM's external_prefix_cache_hits; the engine's CPU tier)
    Figure("external_prefix_hit_tokens", "tokens", "memory", True),
    # prompt tokens neither cache served: computed (again, after a recompute preemption); the bundled engine's
    Figure("computed_prompt_tokens", "tokens", "memory", True),
    Figure("num_steps", "count", "memory", True),
    Figure("mean_tokens_per_step", "tokens", "memory"),  # scheduled tokens / steps: the batching, not the clock
    Figure("peak_rss_bytes", "bytes", "memory"),
    Figure("peak_cuda_allocated_bytes", "bytes", "memory"),
    Figure("peak_nvml_used_bytes", "bytes", "memory"),
)
_PREDICTED_LATENCY = (
    Figure("median_ttft_ms", "ms", "latency", True, None, True),
    Figure("p99_ttft_ms", "ms", "latency", True, "+50%", True),
    Figure("mean_ttft_ms", "ms", "latency", True),
    Figure("median_itl_ms", "ms", "latency", True),
    Figure("p99_itl_ms", "ms", "latency", True, "+50%", True),
    Figure("mean_tpot_ms", "ms", "latency", True, None, True),
    Figure("median_e2el_ms", "ms", "latency", True),
)
_THROUGHPUT = (
    Figure("duration", "s", "throughput", True, None, True, "duration_s"),
    Figure("num_requests", "count", "requests"),
    Figure("completed", "count", "requests"),
    Figure("failed", "count", "requests"),
    Figure("errored", "count", "requests"),
    Figure("aborted", "count", "requests"),
    Figure("total_input_tokens", "tokens", "throughput"),
    Figure("total_output_tokens", "tokens", "throughput"),
    Figure("request_throughput", "req/s", "throughput", False, None, True),
    Figure("output_throughput", "tok/s", "throughput", True, "-30%", True),
    Figure("total_token_throughput", "tok/s", "throughput"),
    Figure("max_concurrent_requests", "count", "throughput"),
    Figure("request_goodput", "req/s", "slo"),
    Figure("good_requests", "count", "slo"),
    Figure("goodput_ratio", "ratio", "slo", False, None, True),
    Figure("slo_met", "bool", "slo"),
)
_MACHINE = (  # measured in the run against the cost model (machine_speed.py); engine targets only
    Figure("machine_speed_ratio", "x", "machine"),  # total measured / total modelled step time
    Figure("machine_speed_median", "x", "machine"),  # the median step's ratio
    Figure("machine_speed_p10", "x", "machine"),
    Figure("machine_speed_p90", "x", "machine"),
    Figure("cpu_busy_cores", "cores", "machine"),
    Figure("engine_threads", "threads", "machine"),
    # the reference kernel (engine/reference_kernel.py) timed between the run's steps: mean time,
    # and against its time when the cost model was calibrated (the machine's own slowdown)
    Figure("reference_kernel_ms", "ms", "machine"),
    Figure("reference_kernel_cpu_ms", "ms", "machine"),
    Figure("cpu_wait_share", "ratio", "machine"),  # of the steps' wall time, waiting for a CPU (run queue)
    Figure("reference_slowdown", "x", "machine"),
    Figure("engine_speed_ratio", "x", "machine"),  # machine_speed_ratio / reference_slowdown: the engine's own
)
# Latency with the CPU waits taken out, in units of the reference kernel's CPU time in the same run
# (machine_speed.ReferenceTiming): a busy or slower machine moves latency and yardstick together,
# a slower engine only the latency, so these hold still across machines and loads and the gate
# holds them tight (+25%); raw latency stays a wide secondary check.
NORMALIZED_FROM: dict[str, str] = {"mean_ttft_ref": "mean_ttft_ms", "median_itl_ref": "median_itl_ms",
                                   "mean_tpot_ref": "mean_tpot_ms", "output_tokens_per_ref": "output_throughput"}
_NORMALIZED = (
    Figure("mean_ttft_ref", "ref", "normalized", False, "+25%"),
    Figure("median_itl_ref", "ref", "normalized", False, "+25%"),
    Figure("mean_tpot_ref", "ref", "normalized", False, "+25%"),
    Figure("output_tokens_per_ref", "tok/ref", "normalized", False, "-20%"),  # 1 / 1.25: the same bound
)


def _latency_stats(percentiles: Sequence[float]) -> list[Figure]:
    named = {f.name: f for f in _PREDICTED_LATENCY}
    out = []
    for m in LATENCIES:
        for stat in ("mean", "median", "std", *(f"p{percentile_word(p)}" for p in percentiles)):
            name = f"{stat}_{m}_ms"
            out.append(named.get(name, Figure(name, "ms", "latency")))
    return out


def percentile_word(p: float) -> str:
    """99 -> '99', 99.9 -> '99.9' (vLLM's key spelling)."""
    return str(int(p)) if float(p).is_integer() else f"{p:g}"


def all_figures(percentiles: Sequence[float] = PERCENTILES) -> tuple[Figure, ...]:
    """Every figure a run can report, in reading order: memory, latency, throughput, SLO."""
    return (*_MEMORY, *_latency_stats(percentiles), *_THROUGHPUT, *_MACHINE, *_NORMALIZED)


FIGURES: dict[str, Figure] = {f.name: f for f in all_figures()}


def figure(name: str) -> Figure | None:
    """The registry's entry; latency statistics at any percentile (p99.9_itl_ms) are recognised."""
    if name in FIGURES:
        return FIGURES[name]
    return Figure(name, "ms", "latency") if _LATENCY_RE.match(name) else None


def names(group: Group | None = None, *, predicted: bool | None = None) -> tuple[str, ...]:
    return tuple(f.name for f in FIGURES.values()
                 if (group is None or f.group == group) and (predicted is None or f.predicted == predicted))


def metric_names(percentiles: Sequence[float] = PERCENTILES) -> list[str]:
    """Every key `compute_metrics` returns for these percentiles (memory figures come from the target)."""
    return [f.name for f in all_figures(percentiles) if f.group not in ("memory", "machine", "normalized")]


def unit_of(name: str) -> str:
    """The figure's unit; for a key the registry does not know (a newer result), a guess from its suffix."""
    f = figure(name)
    if f is not None:
        return f.unit
    for suffix, unit in (
        ("_bytes", "bytes"),
        ("_ms", "ms"),
        ("_s", "s"),
        ("_ratio", "ratio"),
        ("_throughput", "tok/s"),
    ):
        if name.endswith(suffix):
            return unit
    return ""


def prediction_key(name: str) -> str:
    f = FIGURES.get(name)
    return f.prediction_key if f is not None and f.prediction_key else name


def default_gate() -> tuple[tuple[str, ...], dict[str, str]]:
    """(exact figures, {figure: tolerance}): the gate's checks for a scenario whose gate block names none."""
    exact = tuple(f.name for f in FIGURES.values() if f.default_gate == "exact")
    relative = {f.name: f.default_gate for f in FIGURES.values() if f.default_gate not in (None, "exact")}
    return exact, relative


def figure_value(source: Mapping[str, Any], name: str) -> float | None:
    """`source[name]` as a number; `p50_X` and `median_X` stand for each other (the prediction
    stores medians, scenarios may gate on p50). bools count as 0/1; NaN counts as missing."""
    value = source.get(name)
    if value is None and name.startswith("p50_"):
        value = source.get("median_" + name.removeprefix("p50_"))
    elif value is None and name.startswith("median_"):
        value = source.get("p50_" + name.removeprefix("median_"))
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return value
    return None
