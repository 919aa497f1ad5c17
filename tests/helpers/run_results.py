"""Synthetic `RunResult`s shaped like `kvplan stress` output, for report and gate tests.

The records come from a toy closed-loop engine (prefill then decode with jittered gaps), so the
timeline, metrics and prediction agree with each other the way a real run's do: peak KV is the
largest sum of the running requests' blocks, preemptions are counted where the pool overflows.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvplan.results.metrics import compute_metrics, compute_per_class_metrics
from kvplan.results.record import RequestRecord
from kvplan.results.result import Environment, RunResult, TimelineSample
from kvplan.stress.scenario_loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]
BYTES_PER_BLOCK = 32_768  # tiny-llama, float32 KV, block 16 (as ci-smoke and mixed)
BLOCK_SIZE = 16


def _records(scenario: Any, n: int, concurrency: int, rng: np.random.Generator) -> list[RequestRecord]:
    classes = scenario.workload.classes
    weights = np.array([c.weight for c in classes], dtype=float)
    slots = [0.0] * concurrency  # closed loop: a request starts when a slot frees
    out = []
    for i in range(n):
        c = classes[int(rng.choice(len(classes), p=weights / weights.sum()))]
        lo_p, hi_p = c.prompt_tokens.lower_tokens, c.prompt_tokens.upper_tokens or 4 * c.prompt_tokens.lower_tokens
        lo_o, hi_o = c.output_tokens.lower_tokens, c.output_tokens.upper_tokens or 4 * c.output_tokens.lower_tokens
        prompt, output = int(rng.integers(lo_p, hi_p + 1)), int(rng.integers(lo_o, hi_o + 1))
        slot = int(np.argmin(slots))
        arrival = slots[slot]
        first = arrival + 0.05 + prompt * 2e-4 + float(rng.exponential(0.02))
        gaps = rng.gamma(4.0, 0.004, size=output - 1) + (rng.random(output - 1) < 0.02) * 0.05  # rare stalls
        times = tuple(float(t) for t in first + np.concatenate([[0.0], np.cumsum(gaps)]))
        status = "error" if i == n - 3 else "ok"  # one failure, as real runs have
        rec = RequestRecord(
            f"req-{i:06d}",
            c.name,
            round(arrival, 6),
            times[0] if status == "ok" else None,
            times if status == "ok" else (),
            times[-1] + 0.001,
            prompt,
            output if status == "ok" else 0,
            status=status,
            error="synthetic failure" if status != "ok" else None,
            is_warmup=i < scenario.warmup_requests,
        )
        slots[slot] = rec.finish_s
        out.append(rec)
    return out


def _timeline(records: list[RequestRecord], pool_blocks: int, step_s: float) -> list[dict[str, Any]]:
    end = max(r.finish_s or r.arrival_s for r in records)
    samples, preempted = [], 0
    for t in np.arange(0.0, end + step_s, step_s):
        running = [r for r in records if r.first_token_s is not None and r.arrival_s <= t < (r.finish_s or 0)]
        waiting = sum(1 for r in records if r.arrival_s <= t and (r.first_token_s is None or t < r.first_token_s)
                      and t < (r.finish_s or 0))
        blocks = sum(
            math.ceil((r.prompt_tokens + sum(1 for x in r.token_times_s if x <= t)) / BLOCK_SIZE) for r in running
        )
        if blocks > pool_blocks:  # the engine would preempt until it fits
            preempted += 1
            blocks = pool_blocks
        samples.append({"t_s": round(float(t), 6), "kv_bytes_used": blocks * BYTES_PER_BLOCK,
                        "kv_pool_bytes": pool_blocks * BYTES_PER_BLOCK, "kv_blocks_used": blocks,
                        "running": len(running), "waiting": waiting, "preemptions": preempted,
                        "rss_bytes": 400_000_000 + 1000 * blocks})
    return samples


def make_result(*, scenario_file: str = "ci-smoke.yaml", n_requests: int = 36, allocator: str = "paged",
                seed: int = 0, model_name: str | None = None, server_telemetry: bool = False,
                concurrency: int | None = None) -> RunResult:
    scenario = load_scenario(ROOT / "scenarios" / scenario_file)
    pool_blocks = scenario.num_gpu_blocks() or 128
    rng = np.random.default_rng(seed)
    conc = concurrency or (scenario.arrival.in_flight_cap or 16)
    if allocator == "contiguous":  # preallocation: max_model_len reserved per request
        conc = max(1, min(conc, pool_blocks * BLOCK_SIZE // scenario.max_model_len))
    records = _records(scenario, n_requests, conc, rng)
    timeline = _timeline(records, pool_blocks, step_s=0.05)
    peak = max(s["kv_bytes_used"] for s in timeline)
    onset = next((s["t_s"] for s in timeline if s["preemptions"]), None)
    figures = {
        "num_gpu_blocks": pool_blocks,
        "kv_pool_bytes": pool_blocks * BYTES_PER_BLOCK,
        "bytes_per_block": BYTES_PER_BLOCK,
        "peak_kv_bytes": peak,
        "peak_kv_blocks": peak // BYTES_PER_BLOCK,
        "peak_running_requests": max(s["running"] for s in timeline),
        "num_preemptions": timeline[-1]["preemptions"],
        "preemption_onset_s": onset,
        "num_swaps": 0,
        "prefix_hit_tokens": 0,
        "peak_rss_bytes": max(s["rss_bytes"] for s in timeline),
        "peak_cuda_allocated_bytes": None,
        "peak_cuda_reserved_bytes": None,
    }
    metrics = {**compute_metrics(records, scenario.slo), **figures}
    # the planner's view: same memory, latencies ~8% off, its own (simulated) clock
    predicted_timeline = [
        {
            "t_s": round(s["t_s"] * 1.07, 6),
            "kv_bytes_used": s["kv_bytes_used"],
            "running": s["running"],
            "waiting": s["waiting"],
            "preemptions": s["preemptions"],
        }
        for s in timeline[::2]
    ]
    prediction = {k: figures[k] for k in ("num_gpu_blocks", "kv_pool_bytes", "bytes_per_block", "peak_kv_bytes",
                                          "peak_running_requests", "num_preemptions", "preemption_onset_s")}
    for key in ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "mean_tpot_ms"):
        prediction[key] = metrics[key] * 0.92 if metrics[key] is not None else None
    prediction.update(timeline=predicted_timeline,
                      cost_model={"kind": "calibrated", "source": "profiles/calibration/cpu.yaml",
                                  "prefill_s_per_token": 2e-4, "decode_s_per_seq": 4e-3, "step_overhead_s": 1e-3})
    sc = scenario.to_dict()
    sc["engine"]["allocator"] = allocator
    if model_name is not None:
        sc["model"]["name"] = model_name
    result = RunResult(
        scenario=sc, allocator=allocator,
        environment=Environment(python="3.11.9", platform="Linux-6.1-x86_64", cpu_count=2, kvplan="0.1.0",
                                torch="2.13.0+cpu", transformers="5.1.0", numpy="2.4.6", device="cpu",
                                device_name="x86_64", git_commit="0123456789abcdef0123456789abcdef01234567"),
        prediction=prediction, requests=[r.to_dict() for r in records], metrics=metrics,
        per_class=compute_per_class_metrics(records, scenario.slo),
        timeline=[TimelineSample(**s) for s in timeline], notes=["synthetic result for tests"],
    )
    if server_telemetry:
        pool = pool_blocks * BYTES_PER_BLOCK
        result.server_telemetry = [{"t_s": s["t_s"], "kv_cache_usage_perc": s["kv_bytes_used"] / pool,
                                    "num_requests_running": s["running"], "num_requests_waiting": s["waiting"]}
                                   for s in timeline[::4]]
        result.server_info = {"url": "http://127.0.0.1:8000/v1", "server": "kvplan serve", "model": sc["model"]["name"]}
    return result


@pytest.fixture(scope="session")
def result_factory() -> Callable[..., RunResult]:
    return make_result


@pytest.fixture(scope="session")
def smoke_result() -> RunResult:
    return make_result()


@pytest.fixture
def smoke_path(tmp_path: Path, smoke_result: RunResult) -> Path:
    return smoke_result.write_atomic(tmp_path / "result.json")
