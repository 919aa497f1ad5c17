"""One run from several hosts' results: the same scenario sent to one server from N machines (each
with its own seed), merged as if one client had sent it all (`kvplan report --merge`).

- Clocks: each result's records are on its own run clock; `server_info.started_unix_s` (the wall
  time of that clock's zero) puts them on one, shifted to the earliest start. Hosts need synced
  clocks (NTP: milliseconds), which only throughput's span depends on: latencies are per request.
- Metrics: recomputed from the union of the raw records (exact percentiles: samples are merged,
  never percentiles), so throughput is every host's requests over the span from the first send to
  the last token.
- Server figures (pool, KV use, prefix-cache counters, its /metrics timeline): every host scraped
  the same server, so they come from the host whose run lasted longest (its counters' window
  covers the most), never summed.
- Prediction: none: each host predicted its own share of the load, not the server's whole load.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvplan.errors import KvplanError
from kvplan.results.metrics import compute_metrics, compute_per_class_metrics
from kvplan.results.record import RequestRecord
from kvplan.results.result import RunResult
from kvplan.results.slo import Slo

# figures a host reads from the server (counter deltas and samples over its own window), not from its records
SERVER_KEYS = ("num_gpu_blocks", "kv_pool_bytes", "bytes_per_block", "peak_kv_bytes", "peak_running_requests",
               "num_preemptions", "prefix_hit_tokens", "external_prefix_hit_tokens")


def _shifted(record: RequestRecord, host: int, offset_s: float) -> RequestRecord:
    def at(t: float | None) -> float | None:
        return None if t is None else t + offset_s

    return replace(record, request_id=f"h{host}:{record.request_id}", arrival_s=record.arrival_s + offset_s,
                   first_token_s=at(record.first_token_s),
                   token_times_s=tuple(t + offset_s for t in record.token_times_s), finish_s=at(record.finish_s))


def _check(results: list[RunResult], names: list[str]) -> None:
    if len(results) < 2:
        raise KvplanError("--merge takes two or more result.json files (one per host)")
    for name, r in zip(names, results):
        if not r.server_info.get("url"):
            raise KvplanError(f"{name}: a bundled-engine run; --merge joins runs of several clients against one "
                              "server (kvplan stress --target)")
    first = results[0]
    for name, r in zip(names[1:], results[1:]):
        if r.scenario_name != first.scenario_name:
            raise KvplanError(f"{name}: scenario {r.scenario_name!r}, not {first.scenario_name!r}: --merge joins "
                              "hosts that ran the same scenario")


def merge_results(results: list[RunResult], names: list[str]) -> RunResult:
    """The hosts' results (`names`: where each was read, for messages) as one run."""
    _check(results, names)
    starts = [r.server_info.get("started_unix_s") for r in results]
    notes = [f"merged from {len(results)} hosts' results: {', '.join(names)}; no prediction (each host predicted "
             "its own share of the load)"]
    if any(not isinstance(s, (int, float)) for s in starts):
        starts = [0.0] * len(results)
        notes.append("a result has no start time (server_info.started_unix_s): the hosts are taken to have "
                     "started together")
    t0 = min(starts)  # type: ignore[type-var]
    records = [_shifted(rec, i + 1, float(s) - float(t0))  # type: ignore[arg-type]
               for i, (r, s) in enumerate(zip(results, starts)) for rec in r.records()]
    seeds: dict[Any, list[str]] = {}
    for name, r in zip(names, results):
        seeds.setdefault(r.scenario.get("seed"), []).append(name)
    notes += [f"{', '.join(hosts)} ran with the same seed {seed}: they sent the same prompts (give each host its "
              "own --seed)" for seed, hosts in seeds.items() if len(hosts) > 1]
    urls = sorted({str(r.server_info.get("url")) for r in results})
    if len(urls) > 1:
        notes.append(f"the hosts named the server differently ({', '.join(urls)}): one server is assumed")
    longest = max(range(len(results)), key=lambda i: float(results[i].metrics.get("duration") or 0.0))
    source = results[longest]
    notes.append(f"server figures (pool, KV use, prefix-cache counters) from {names[longest]}, the longest run")
    slo = Slo.model_validate(results[0].scenario.get("slo") or {})
    metrics = {**compute_metrics(records, slo), **{k: source.metrics[k] for k in SERVER_KEYS if k in source.metrics}}
    max_error_rate = float(results[0].scenario.get("max_error_rate", 0.0) or 0.0)
    total = metrics.get("num_requests") or 0  # the driver's rule, over every host's requests
    failed = bool(total) and (metrics.get("errored") or 0) / total > max_error_rate
    return RunResult(
        scenario=results[0].scenario, allocator=results[0].allocator, environment=results[0].environment,
        requests=[r.to_dict() for r in sorted(records, key=lambda r: r.arrival_s)], metrics=metrics,
        per_class=compute_per_class_metrics(records, slo), timeline=source.timeline,
        complete=all(r.complete for r in results), verdict="failed" if failed else "ok",
        errors=list(dict.fromkeys(e for r in results for e in r.errors))[:20],
        notes=[*notes, *dict.fromkeys(n for r in results for n in r.notes)],
        server_telemetry=source.server_telemetry, server_info={**source.server_info, "hosts": len(results)})
