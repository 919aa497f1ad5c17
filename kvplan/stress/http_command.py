"""`kvplan stress --target URL`: the scenario against an OpenAI-compatible server.

The prediction is made first from the scenario's own engine settings (pool size from the planner,
latencies from the cost model); the server's `cache_config_info` is then checked against it. Memory
is measured from the server's `/metrics` (KV usage x pool), sampled about twice a second, so its
peak is a lower bound of the true one.
"""
from __future__ import annotations

from typing import Any

from rich.console import Console

from kvplan.report.result import RunResult, TimelineSample, collect_environment
from kvplan.stress.metrics import compute_metrics, compute_per_class_metrics, max_in_flight
from kvplan.stress.predict import load_cost_model, predict
from kvplan.stress.scenario import Scenario
from kvplan.stress.workload import RequestSpec


def _timeline(samples: list[dict[str, Any]], pool_bytes: int | None) -> list[TimelineSample]:
    out = []
    for s in samples:
        usage = s.get("kv_cache_usage_perc")
        out.append(TimelineSample(
            t_s=float(s["t_s"]), kv_bytes_used=int(round(usage * pool_bytes)) if usage is not None and pool_bytes else None,
            kv_pool_bytes=pool_bytes, running=_int(s.get("num_requests_running")), waiting=_int(s.get("num_requests_waiting")),
            preemptions=_int(s.get("num_preemptions_total")), prefix_hit_tokens=_int(s.get("prefix_cache_hits_total"))))
    return out


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def run_http_stress(scenario: Scenario, requests: list[RequestSpec], opts: Any, console: Console) -> RunResult:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kvplan.stress.targets.openai_http import run_http

    bytes_per_block = scenario.bytes_per_block()
    blocks = scenario.num_gpu_blocks()
    prediction: dict[str, Any] = {}
    notes = [f"target: {opts.target} ({opts.api} API); memory from /metrics (sampled; peak is a lower bound)"]
    if blocks is not None:
        cost_model, source = load_cost_model(scenario, opts.calibration)
        prediction = predict(scenario, requests, num_gpu_blocks=blocks, bytes_per_block=bytes_per_block,
                             cost_model=cost_model, cost_source=source, allocator="paged")
        notes.append(f"cost model: {source}")
    else:
        notes.append("no prediction: the scenario does not fix the server's KV pool (kv_cache_memory_bytes)")
    closed = scenario.arrival.type == "concurrency"
    with Progress(TextColumn(f"[bold]{scenario.name}[/bold] -> {opts.target}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not opts.progress, transient=True) as bar:
        task = bar.add_task("requests", total=len(requests))
        out = run_http(requests, url=opts.target, api=opts.api, served_model_name=opts.served_model_name,
                       api_key_env=opts.api_key_env, timeout_s=opts.timeout_s,
                       concurrency=scenario.arrival.concurrency if closed else None,
                       warmup_request_ids=frozenset(r.request_id for r in requests if r.is_warmup),
                       on_progress=lambda n: bar.update(task, completed=n))
    info = dict(out.server_info)
    server_blocks = info.get("num_gpu_blocks")
    if blocks is not None and server_blocks is not None and int(server_blocks) != blocks:
        notes.append(f"the server's pool has {server_blocks} blocks; the scenario's settings give {blocks}")
    pool_blocks = int(server_blocks) if server_blocks is not None else blocks
    pool_bytes = pool_blocks * bytes_per_block if pool_blocks is not None else None
    timeline = _timeline(out.telemetry, pool_bytes)
    peak = max((s.kv_bytes_used or 0 for s in timeline), default=None)
    metrics = {
        **compute_metrics(out.records, scenario.slo),
        "num_gpu_blocks": pool_blocks, "kv_pool_bytes": pool_bytes, "bytes_per_block": bytes_per_block,
        "peak_kv_bytes": peak, "max_concurrency": max((s.running or 0 for s in timeline), default=None),
        "num_preemptions": timeline[-1].preemptions if timeline else None,
        "max_concurrent_requests": max_in_flight(out.records),
        "token_mismatches": len(out.token_mismatches), "errors_by_kind": dict(out.errors),
    }
    if out.token_mismatches:
        notes.append(f"{len(out.token_mismatches)} requests got a different number of tokens than asked: "
                     + "; ".join(out.token_mismatches[:5]))
    if not out.complete:
        notes.append("interrupted: partial result")
    return RunResult(
        scenario=scenario.to_dict(), allocator="paged", environment=collect_environment(),
        prediction=prediction, requests=[r.to_dict() for r in out.records], metrics=metrics,
        per_class=compute_per_class_metrics(out.records, scenario.slo), timeline=timeline, complete=out.complete,
        notes=notes, server_telemetry=list(out.telemetry), server_info=info)
